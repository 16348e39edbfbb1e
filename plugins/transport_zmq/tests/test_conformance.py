"""The transport conformance kit against the zmq transport, on ipc and tcp, one or two transport objects."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tetrarch.plugins import Transport
from tetrarch_transport_zmq._plugin import probe

pytestmark = pytest.mark.skipif(not probe().ok, reason=probe().reason)

from tetrarch.testing.transport import TransportConformance  # noqa: E402


def _zmq() -> Transport:
    from tetrarch_transport_zmq._zmq import ZmqTransport

    return ZmqTransport()


class TestZmqIpc(TransportConformance):
    @pytest.fixture
    def transport(self) -> Iterator[Transport]:
        t = _zmq()
        yield t
        t.close()


class TestZmqTcp(TransportConformance):
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

    @pytest.fixture
    def client_transport(self) -> Iterator[Transport]:
        t = _zmq()
        yield t
        t.close()
