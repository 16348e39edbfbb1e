"""The transport conformance kit against core's builtin ipc and tcp transports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tetrarch._runtime.values._buffers import as_bytes
from tetrarch._transport._base import Transport
from tetrarch._transport._socket import IpcTransport, SocketTransport, TcpTransport
from tetrarch.testing import scaled
from tetrarch.testing.transport import Recorder, TransportConformance


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

    preauth_skip = "the pre-auth tests use no client_transport: TestTcpTransport runs them on this listener"

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


@pytest.mark.parametrize("kind", [IpcTransport, TcpTransport])
def test_large_frames_arrive_in_buffers_a_receiver_adopts_as_bytes(kind: type[SocketTransport]) -> None:
    """A large message is read in place, each large frame into a buffer of its own backed by a bytes object."""
    transport = kind()
    recorder = Recorder()
    try:
        listener = transport.listen(transport.default_address(spans_hosts=False), recorder)
        conn = transport.connect(listener.address, Recorder(), timeout=scaled(10))
        sent = [b"header", bytes(range(256)) * (16 << 10), b"small" * 100, b"", bytes(range(255, -1, -1)) * 512]
        conn.send(sent)  # 4 MiB + 128 KiB: over the in-place threshold
        (frames,) = recorder.wait_messages(recorder.wait_opened(), 1)
        assert [f.tobytes() for f in frames] == sent
        for i in (1, 4):
            adopted = as_bytes(frames[i])
            assert adopted == sent[i] and as_bytes(frames[i]) is adopted, f"frame {i} was copied to become bytes"
            assert not frames[i].readonly, "arrays rebuilt over a frame must stay writable"
        conn.close()
        listener.close()
    finally:
        transport.close()
