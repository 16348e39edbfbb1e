"""The transport conformance kit against the nng transport, on ipc and tcp addresses.

The pre-authentication tests' stranger (:meth:`_NngStranger.preauth_flood`) gets as far
into nng as anyone can without the key: the SP header of a ``pair0`` peer (after which
nng adds the pipe and the kernel's own pre-authentication stage takes over) and the
largest message nng then takes in one piece (``CHUNK`` bytes), all but its last byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from tetrarch.plugins import Transport
from tetrarch.testing.transport import TransportConformance

pytest.importorskip("pynng")

from tetrarch_transport_nng._conn import CHUNK, PAIR0_HEADER
from tetrarch_transport_nng._nng import NngTransport


def sp_message_flood(address: str) -> bytes:
    """The SP header of a pair0 peer, then one ``CHUNK``-byte nng message less its last byte.

    The wire is nng's TCP framing on tcp and ipc addresses alike (nng's ``socket://``
    transport): an 8-byte length, then the message.
    """
    return PAIR0_HEADER + struct.pack("!Q", CHUNK) + bytes(CHUNK - 1)


class _NngStranger(TransportConformance):
    def preauth_flood(self, address: str) -> bytes | None:
        return sp_message_flood(address)

    def raw_frame_count(self, transport: Transport, count: int) -> bytes | None:
        """A pair0 peer's SP header and a 4-byte nng message: the frame count alone."""
        return PAIR0_HEADER + struct.pack("!QI", 4, count)


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
