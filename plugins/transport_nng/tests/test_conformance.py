"""The transport conformance kit against the nng transport, on ipc and tcp addresses.

The pre-authentication tests' stranger (:meth:`_NngStranger.preauth_flood`) gets as far
into nng as anyone can without the key: the SP header of a ``req0`` peer (which the
listener's ``rep0`` rendezvous socket accepts: the pipe is then open inside nng) and a
genuine rendezvous request, all but its last byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from tetrarch._transport._base import Transport
from tetrarch.testing.transport import TransportConformance

pytest.importorskip("pynng")

from tetrarch_transport_nng._nng import NngTransport

#: nng's protocol number of req0, whose peers rep0 accepts (``NNI_PROTO(3, 0)``).
REQ0 = 0x30


def sp_request_flood(address: str) -> bytes:
    """The SP header of a req0 peer, then a genuine rendezvous request less its last byte.

    A req0 request on the wire is a 4-byte request id (top bit set) and the body, the
    transport's magic and a 16-byte token; every rendezvous must take that much. On tcp
    a message is an 8-byte length and the message; on ipc a 1-byte type (1) comes first.
    """
    from tetrarch_transport_nng._nng import _MAGIC, _REQUEST

    message = b"\x80\x00\x00\x01" + _MAGIC + b"t" * (_REQUEST - len(_MAGIC))
    header = b"\0SP\0" + struct.pack("!H", REQ0) + b"\0\0"
    length = struct.pack("!Q", len(message))
    frame = length if address.startswith("nng+tcp://") else b"\x01" + length
    return header + frame + message[:-1]


class _NngStranger(TransportConformance):
    def preauth_flood(self, address: str) -> bytes | None:
        return sp_request_flood(address)


class TestNngIpc(_NngStranger):
    @pytest.fixture
    def transport(self) -> Iterator[Transport]:
        t = NngTransport()
        yield t
        t.close()


class TestNngTcp(_NngStranger):
    @pytest.fixture
    def transport(self) -> Iterator[Transport]:
        t = NngTransport()
        yield t
        t.close()

    @pytest.fixture
    def address(self) -> str:
        return "nng+tcp://127.0.0.1:0"


class TestNngTcpTwoInstances(TestNngTcp):
    """Client and server on separate transport objects (separate I/O threads)."""

    preauth_skip = "the pre-auth tests use no client_transport: TestNngTcp runs them on this listener"

    @pytest.fixture
    def client_transport(self) -> Iterator[Transport]:
        t = NngTransport()
        yield t
        t.close()
