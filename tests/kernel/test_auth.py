"""Nothing from the network is unpickled before the peer proved it holds the secret."""

from __future__ import annotations

import os
import pickle
import struct

import pytest

from raw_socket import raw_connect
from tetrarch._runtime.router._router import PeerUnreachable, Router
from tetrarch._runtime.values._wire import OK, SYS, port_header, sys_header
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


def _sink_port(rt: Router, dest: bytearray):
    """A port of ``rt`` whose payloads are offered ``dest``; (port, sink calls, messages)."""
    asked: Collector[int] = Collector("sink requests")
    got: Collector[tuple] = Collector("port messages")
    view = memoryview(dest)
    port = rt.open_port(lambda hdr, frames: got.add((hdr.tag, frames[0], frames[0] is view)),
                        lambda hdr, n: (asked.add(n), view if hdr.tag == 1 and n == len(dest) else None)[1])
    return port, asked, got


@pytest.mark.transport_independent  # pins ipc and tcp itself
def test_an_unauthenticated_peer_never_reaches_a_port_sink(server):
    """A receive sink is memory the kernel lets a peer write into: a peer nobody vouched for is
    cut off (pre-auth limit) before any sink is consulted."""
    rt, _calls = server
    dest = bytearray(2 << 20)
    port, asked, got = _sink_port(rt, dest)
    s = raw_connect(rt.address)
    s.recv(4096)
    try:
        s.sendall(_frame(port_header(port, 1, OK), b"\xff" * len(dest)))
        assert s.recv(4096) == b""
    except (BrokenPipeError, ConnectionResetError):
        pass  # cut off while still sending: as good
    s.close()
    assert not asked.items and not got.items and dest == bytearray(len(dest))


@pytest.mark.transport_independent  # pins ipc and tcp itself
def test_an_authenticated_payload_lands_in_the_port_sink(server):
    """On the builtin transports the payload of a large port message is received straight into the
    memory the port's sink names (no buffer of its own, no copy), and handed over as that very view;
    a payload the sink declines arrives as before."""
    rt, _calls = server
    dest = bytearray(4 << 20)
    port, asked, got = _sink_port(rt, dest)
    friend_transport = type(rt.transport)()
    friend = Router(friend_transport, b"s" * 32, name="friend")
    payload = bytes(range(256)) * (len(dest) // 256)
    try:
        friend.send(rt.address, [port_header(port, 1, OK), payload])  # accepted by the sink
        friend.send(rt.address, [port_header(port, 2, OK), payload])  # declined: a buffer of its own
        (tag1, frame1, in_place1), (tag2, frame2, in_place2) = got.wait(2, timeout=10)
    finally:
        friend.close()
        friend_transport.close()
    assert asked.items == [len(dest), len(dest)]
    assert (tag1, in_place1) == (1, True) and dest == payload and bytes(frame1) == payload
    assert (tag2, in_place2) == (2, False) and bytes(frame2) == payload


def test_secret_is_not_on_any_command_line(procs):
    secret_hex = __import__("tetrarch._runtime.process._root", fromlist=["get_root"]).get_root().secret.hex()
    import psutil

    for proc in psutil.Process(os.getpid()).children(recursive=True):
        assert secret_hex not in " ".join(proc.cmdline())
