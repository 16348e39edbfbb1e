"""What a connection that has not authenticated yet may cost a router: bounded memory, no thread.

Anyone who can reach a router's address (any local user finds an abstract socket with
``ss -xl``) can open connections without knowing the secret. Each such connection may
hold only a few KiB (the frame header counts toward ``PRE_AUTH_LIMIT``), only so many
of them wait at once (past the router's cap the oldest is closed), and they wait in one
deadline table served by one thread instead of a timer thread each.
"""

from __future__ import annotations

import contextlib
import gc
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from tetrarch._runtime.router._router import Router
from tetrarch._runtime.values._wire import sys_header
from tetrarch._transport._auth import PRE_AUTH_LIMIT, Auth, Role
from tetrarch._transport._base import TransportError
from tetrarch._transport._socket import IpcTransport
from tetrarch.testing import Collector, closed_now, scaled

# Pins the ipc transport itself (run once, not per transport).
pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(60))]

SECRET = b"s" * 32
#: The largest frame count the builtin transport accepts at all: a 512 KiB header.
MAX_FRAMES = 1 << 16


def _frame(*frames: bytes) -> bytes:
    return struct.pack(f"!I{len(frames)}Q", len(frames), *map(len, frames)) + b"".join(frames)


def _raw_connect(address: str) -> socket.socket:
    assert address.startswith("ipc://@"), address
    s = socket.socket(socket.AF_UNIX)
    s.connect("\0" + address[len("ipc://@"):])  # blocking: waits for room in the backlog, not EAGAIN
    s.settimeout(scaled(5))
    return s


def _recv_exact(s: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


def _read_message(s: socket.socket) -> list[memoryview]:
    (count,) = struct.unpack("!I", _recv_exact(s, 4))
    sizes = struct.unpack(f"!{count}Q", _recv_exact(s, 8 * count))
    return [memoryview(_recv_exact(s, n)) for n in sizes]


def _authenticate(s: socket.socket) -> None:
    """Run the dialer's side of the handshake on a raw socket (raises if it fails)."""
    auth = Auth(Role.DIALER, SECRET, "ipc://@preauth-tester")
    reply = auth.step(_read_message(s))
    assert reply is not None
    s.sendall(_frame(*reply))
    auth.step(_read_message(s))
    assert auth.done


def _closed_by_peer(s: socket.socket, timeout: float) -> bool:
    """Whether the router closed ``s`` within ``timeout`` s (what it sent before is skipped)."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:  # reset: the router closed with our bytes unread
        return True
    return True


def _all_closed_by_peer(socks: list[socket.socket], timeout: float) -> list[int]:
    """Indexes of the sockets in ``socks`` the router did not close within ``timeout`` s (in all)."""
    deadline = time.monotonic() + timeout
    return [i for i, s in enumerate(socks) if not _closed_by_peer(s, max(0.01, deadline - time.monotonic()))]


def _rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as es:
        yield es


def _router(stack: contextlib.ExitStack, name: str, **kwargs: Any) -> Router:
    transport = IpcTransport()
    stack.callback(transport.close)
    router = Router(transport, SECRET, name=name, **kwargs)
    stack.callback(router.close)
    return router


def _probed_router(stack: contextlib.ExitStack, **kwargs: Any) -> tuple[Router, Collector[str]]:
    calls: Collector[str] = Collector("probe messages")
    server = _router(stack, "server", **kwargs)
    server.add_service("probe", lambda hdr, _payload, _conn: calls.add(hdr.op))
    return server, calls


def test_flood_of_unauthenticated_connections_keeps_memory_bounded(stack):
    cap, n_header, n_idle = 64, 200, 300
    server, calls = _probed_router(stack, max_unauthenticated=cap)
    friend = _router(stack, "friend")
    sent: list[str] = []

    def friend_says(op: str) -> None:
        friend.send(server.address, [sys_header("probe", op)])
        sent.append(op)

    friend_says("before")  # authenticated before the attack
    calls.wait(1)
    socks: list[socket.socket] = []
    stack.callback(lambda: [s.close() for s in socks])
    rss_before = _rss()

    # 1. Each connection announces the most frames the transport takes (a 512 KiB header)
    #    and sends all but the last length, so a router that buffers headers keeps them all.
    bomb = struct.pack("!I", MAX_FRAMES) + bytes(8 * (MAX_FRAMES - 1))
    bombers = []
    for i in range(n_header):
        s = _raw_connect(server.address)
        socks.append(s)
        bombers.append(s)
        with contextlib.suppress(OSError):  # refused while we still write: the point
            s.sendall(bomb)
        if i % 50 == 0:
            friend_says(f"header flood {i}")
    _closed_by_peer(bombers[-1], scaled(5))  # the router has read what we sent
    grown = _rss() - rss_before
    assert grown < 32 << 20, (
        f"{n_header} connections announcing {MAX_FRAMES} frames grew the router's process by "
        f"{grown / 2**20:.0f} MiB before any of them authenticated"
    )
    still_open = _all_closed_by_peer(bombers, scaled(5))
    assert not still_open, f"connections announcing a 512 KiB header before authenticating were kept: {still_open}"

    # 2. Connections that each send the largest first message allowed, less one byte, and
    #    wait: past the cap the router closes the oldest of them.
    partial = struct.pack("!IQ", 1, PRE_AUTH_LIMIT) + bytes(PRE_AUTH_LIMIT - 1)
    idlers = []
    for i in range(n_idle):
        s = _raw_connect(server.address)
        socks.append(s)
        idlers.append(s)
        s.sendall(partial)
        if i % 50 == 0:
            friend_says(f"idle flood {i}")
    _read_message(idlers[-1])  # the last challenge: every connection was accepted (and shed) before it
    calls.wait(len(sent))  # delivered during the attack
    grown = _rss() - rss_before
    assert grown < 32 << 20, f"{n_idle} waiting connections grew the router's process by {grown / 2**20:.0f} MiB"
    closed = [closed_now(s) for s in idlers]
    assert closed == [True] * (n_idle - cap) + [False] * cap, (
        f"expected the oldest {n_idle - cap} waiting connections closed and the newest {cap} open; "
        f"closed: {[i for i, c in enumerate(closed) if c]}"
    )

    # 3. Authenticated peers keep working, and a new peer still gets in (evicting an idler).
    friend_says("after")
    newcomer = _router(stack, "newcomer")
    newcomer.send(server.address, [sys_header("probe", "newcomer")])
    got = calls.wait(len(sent) + 1)
    assert [op for op in got if op != "newcomer"] == sent
    assert "newcomer" in got


def test_connect_close_churn_starts_no_threads(stack):
    server, calls = _probed_router(stack)
    before = threading.active_count()
    for i in range(2000):
        with _raw_connect(server.address) as s:
            if i % 100 == 0:  # some authenticate, and say so
                _authenticate(s)
                s.sendall(_frame(sys_header("probe", f"authenticated {i}")))
            else:
                _read_message(s)  # the challenge
    calls.wait(20)
    grown = threading.active_count() - before
    assert grown <= 3, f"2000 connect/close cycles left {grown} more threads running"


def test_connection_that_never_authenticates_is_closed_after_the_timeout(stack):
    timeout = 0.5
    server, calls = _probed_router(stack, auth_timeout=timeout)
    authenticated = _raw_connect(server.address)
    stack.callback(authenticated.close)
    _authenticate(authenticated)
    opened = time.monotonic()
    silent = _raw_connect(server.address)
    stack.callback(silent.close)
    assert _closed_by_peer(silent, scaled(5)), "a connection that never authenticated was kept open"
    assert time.monotonic() - opened >= timeout * 0.9, "closed before the authentication timeout"
    # The authenticated connection had an earlier deadline, and it stays.
    assert not closed_now(authenticated)
    authenticated.setblocking(True)
    authenticated.sendall(_frame(sys_header("probe", "still here")))
    assert calls.wait(1) == ["still here"]


def test_close_ends_the_deadline_thread_and_waiting_connections(stack):
    def auth_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "tetrarch-auth-waiting"]

    before = len(auth_threads())
    transport = IpcTransport()
    stack.callback(transport.close)
    server = Router(transport, SECRET, name="waiting")
    assert len(auth_threads()) == before + 1
    waiting = _raw_connect(server.address)
    stack.callback(waiting.close)
    _read_message(waiting)
    server.close()
    assert _closed_by_peer(waiting, scaled(5)), "Router.close() left an unauthenticated connection open"
    assert len(auth_threads()) == before, "Router.close() left its deadline thread running"


def test_a_router_that_cannot_listen_leaves_no_thread(stack):
    taken = socket.socket(socket.AF_UNIX)
    stack.callback(taken.close)
    taken.bind(f"\0tetrarch-preauth-taken-{id(taken)}")
    transport = IpcTransport()
    stack.callback(transport.close)
    with pytest.raises(TransportError, match="cannot listen"):
        Router(transport, SECRET, name="unbound", listen_address=f"ipc://@{taken.getsockname()[1:].decode()}")
    for t in threading.enumerate():
        if t.name in ("tetrarch-flush-unbound", "tetrarch-auth-unbound"):
            t.join(scaled(5))
            assert not t.is_alive(), f"{t.name} outlived a router whose listener failed"
