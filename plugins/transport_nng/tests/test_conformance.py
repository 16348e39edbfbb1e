"""The transport conformance kit against the nng transport, on ipc and tcp addresses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tetrarch._transport._base import Transport
from tetrarch.testing.transport import TransportConformance

pytest.importorskip("pynng")

from tetrarch_transport_nng._nng import NngTransport


class TestNngIpc(TransportConformance):
    @pytest.fixture
    def transport(self) -> Iterator[Transport]:
        t = NngTransport()
        yield t
        t.close()


class TestNngTcp(TransportConformance):
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

    @pytest.fixture
    def client_transport(self) -> Iterator[Transport]:
        t = NngTransport()
        yield t
        t.close()
