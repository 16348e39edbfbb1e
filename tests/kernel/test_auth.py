"""Nothing from the network is unpickled before the peer proved it holds the secret."""

from __future__ import annotations

import os
import pickle
import struct

import pytest

from raw_socket import raw_connect
from tetrarch._runtime._router import PeerUnreachable, Router
from tetrarch._runtime._wire import SYS, sys_header
from tetrarch._transport._socket import IpcTransport, TcpTransport
from tetrarch.testing import Collector, scaled

pytestmark = pytest.mark.timeout(scaled(30))


class _Bomb:
    """Unpickling this creates a file: proof that a frame was deserialized."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _frame(*frames: bytes) -> bytes:
    return struct.pack(f"!I{len(frames)}Q", len(frames), *map(len, frames)) + b"".join(frames)


@pytest.fixture(params=[IpcTransport, TcpTransport], ids=["ipc", "tcp"])
def server(request):
    transport = request.param()
    calls: Collector[tuple] = Collector("probe messages")
    rt = Router(transport, b"s" * 32, name="server")
    rt.add_service("probe", lambda hdr, payload, conn: calls.add(hdr))
    yield rt, calls
    rt.close()
    transport.close()


@pytest.mark.transport_independent  # pins ipc and tcp itself
def test_wrong_secret_is_rejected_and_the_listener_keeps_serving(server):
    rt, calls = server
    transport = type(rt.transport)()
    intruder = Router(transport, b"x" * 32, name="intruder")
    try:
        with pytest.raises(PeerUnreachable, match="authentication"):
            intruder.send(rt.address, [sys_header("probe", "hi")])
    finally:
        intruder.close()
        transport.close()
    assert not calls.items
    friend_transport = type(rt.transport)()
    friend = Router(friend_transport, b"s" * 32, name="friend")
    try:
        friend.send(rt.address, [sys_header("probe", "hi")])
        assert calls.wait(1, timeout=5)[0].op == "hi"
    finally:
        friend.close()
        friend_transport.close()


@pytest.mark.transport_independent  # pins ipc and tcp itself
def test_frames_before_the_handshake_are_never_unpickled(server, tmp_path):
    rt, calls = server
    marker = tmp_path / "pwned"
    bomb = pickle.dumps((SYS, "probe", _Bomb(str(marker)), None, None))
    s = raw_connect(rt.address)
    s.recv(4096)  # the listener's challenge
    s.sendall(_frame(bomb) + _frame(bomb, bomb, bomb, bomb))
    # the server closes the connection on the garbage instead of deserializing it
    assert s.recv(4096) == b""
    s.close()
    assert not marker.exists() and not calls.items


@pytest.mark.transport_independent  # pins ipc and tcp itself
def test_oversized_pre_auth_message_is_cut_off(server):
    rt, _calls = server
    s = raw_connect(rt.address)
    s.recv(4096)
    s.sendall(struct.pack("!IQ", 1, 1 << 30))  # announces 1 GiB before authenticating
    assert s.recv(4096) == b""
    s.close()


def test_secret_is_not_on_any_command_line(procs):
    secret_hex = __import__("tetrarch._runtime._root", fromlist=["get_root"]).get_root().secret.hex()
    import psutil

    for proc in psutil.Process(os.getpid()).children(recursive=True):
        assert secret_hex not in " ".join(proc.cmdline())
