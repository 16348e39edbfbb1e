"""The transport conformance kit against the zmq transport, on ipc and tcp, one or two transport objects.

The pre-authentication tests' stranger (:meth:`_ZmqStranger.preauth_flood`) speaks ZMTP as
far as a peer without the allocation's key gets: the greeting, then a PLAIN HELLO command
as large as the listener's ``ZMQ_MAXMSGSIZE`` lets a frame be, all but its last byte, so
libzmq holds the command, unfinished, before its ZAP handler is ever asked.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from tetrarch.plugins import Transport
from tetrarch_transport_zmq._plugin import probe

pytestmark = pytest.mark.skipif(not probe().ok, reason=probe().reason)

from tetrarch.testing.transport import TransportConformance  # noqa: E402


def _zmq() -> Transport:
    from tetrarch_transport_zmq._zmq import ZmqTransport

    return ZmqTransport()


#: ZMTP 3.0 greeting (RFC 23): signature, version 3.0, mechanism PLAIN, as-server 0, filler.
GREETING = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"PLAIN".ljust(20, b"\0") + b"\x00" + bytes(31)


def zmtp_hello_flood() -> bytes:
    """The greeting, then a long command frame (flags 0x06) of the largest size libzmq takes, less
    its last byte: ``HELLO`` and a username as long as the frame (no password yet)."""
    from tetrarch_transport_zmq._conn import CHUNK  # every socket's ZMQ_MAXMSGSIZE

    body = b"\x05HELLO" + b"\xff" + b"u" * (CHUNK - 7)
    return GREETING + b"\x06" + struct.pack("!Q", CHUNK) + body[: CHUNK - 1]


class _ZmqStranger(TransportConformance):
    def preauth_flood(self, address: str) -> bytes | None:
        return zmtp_hello_flood()


class TestZmqIpc(_ZmqStranger):
    @pytest.fixture
    def transport(self) -> Iterator[Transport]:
        t = _zmq()
        yield t
        t.close()


class TestZmqTcp(_ZmqStranger):
    @pytest.fixture
    def transport(self) -> Iterator[Transport]:
        t = _zmq()
        yield t
        t.close()

    @pytest.fixture
    def address(self) -> str:
        return "zmq+tcp://127.0.0.1:0"


class TestZmqTcpTwoInstances(TestZmqTcp):
    """Client and server on separate transport objects (separate contexts and I/O threads)."""

    preauth_skip = "the pre-auth tests use no client_transport: TestZmqTcp runs them on this listener"

    @pytest.fixture
    def client_transport(self) -> Iterator[Transport]:
        t = _zmq()
        yield t
        t.close()
