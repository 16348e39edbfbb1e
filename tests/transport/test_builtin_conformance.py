"""The transport conformance kit against core's builtin ipc and tcp transports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tetrarch._transport._base import Transport
from tetrarch._transport._socket import IpcTransport, TcpTransport
from tetrarch.testing.transport import TransportConformance


class TestIpcTransport(TransportConformance):
    @pytest.fixture
    def transport(self) -> Iterator[Transport]:
        t = IpcTransport()
        yield t
        t.close()


class TestTcpTransport(TransportConformance):
    @pytest.fixture
    def transport(self) -> Iterator[Transport]:
        t = TcpTransport()
        yield t
        t.close()


class TestTcpTransportTwoInstances(TransportConformance):
    """Client and server on separate transport objects (separate I/O threads)."""

    @pytest.fixture
    def transport(self) -> Iterator[Transport]:
        t = TcpTransport()
        yield t
        t.close()

    @pytest.fixture
    def client_transport(self) -> Iterator[Transport]:
        t = TcpTransport()
        yield t
        t.close()
