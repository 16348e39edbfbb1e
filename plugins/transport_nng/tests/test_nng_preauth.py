"""The nng transport's stage before ``on_open`` under strangers (issue 28, items 5, 6 and 10).

A stranger that connects and sends nothing used to be held by nng itself for 10 s with no
callback and no cap, and one that completed the SP header exchange then held a pipe on
the listener's rendezvous socket for good. The transport now accepts connections itself
and holds them to the kernel's :class:`~tetrarch.plugins.PreAuthLimits` until nng opens
them (a deadline, the oldest closed past a cap, a limit on connections in all); one that
sends a ``pair0`` peer's SP header opens at once and is the kernel's to bound. A dial into
a full listen backlog waits for room within its timeout instead of failing at once.

Strangers here are raw sockets to 127.0.0.1 or an abstract Unix socket, bounded in count:
``silent`` ones connect and send nothing, ``header`` ones send a pair0 peer's SP header.
The listener is a kernel router on nng in a child process (the kit's
:class:`~tetrarch.testing.PreAuthTarget`), and the real peers are
:class:`~tetrarch.testing.PreAuthPeer`: core's public testing API, not its private router.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tetrarch.plugins import PreAuthLimits, TransportError
from tetrarch.testing import (
    PreAuthPeer,
    PreAuthTarget,
    closed_now,
    raise_open_file_limit,
    raw_sockaddr,
    scaled,
    still_open,
)
from tetrarch.testing.transport import Recorder

pytest.importorskip("pynng")

from tetrarch_transport_nng._conn import PAIR0_HEADER
from tetrarch_transport_nng._nng import NngTransport

pytestmark = pytest.mark.timeout(scaled(120))

SECRET = b"p" * 32
ADDRESSES = ["ipc", "tcp"]
#: What a stranger sends: nothing (it waits in the transport's gate), or a pair0 peer's SP
#: header (nng opens it; the kernel's pre-authentication stage bounds it).
OPENINGS = ["silent", "header"]


FACTORY = "tetrarch_transport_nng._nng:NngTransport"
#: The kernel's default ``max_unauthenticated`` (a Router's), where a test does not set its own.
DEFAULT_PENDING = 512


def _listen_address(kind: str) -> str:
    if kind == "tcp":
        return "nng+tcp://127.0.0.1:0"
    return f"nng+ipc://@tetrarch-nng-preauth-{os.getpid()}-{time.monotonic_ns()}"


def _sockaddr(address: str) -> tuple[int, Any]:
    where = raw_sockaddr(address)
    assert where is not None and (where[0] == socket.AF_UNIX or where[1][0] == "127.0.0.1"), address  # type: ignore[index]
    return where


def _stranger(address: str, opening: str = "header") -> socket.socket:
    """A raw socket to ``address`` that sends ``opening`` (nothing, or a pair0 peer's SP header),
    reads the header nng sends (the listener handed it to nng) and then says nothing."""
    family, where = _sockaddr(address)
    s = socket.socket(family)
    try:
        s.settimeout(scaled(10))
        s.connect(where)
        if opening == "header":
            s.sendall(PAIR0_HEADER)
        got = b""
        while len(got) < 8:
            chunk = s.recv(8 - len(got))
            assert chunk, "the listener closed before its SP header"
            got += chunk
        assert got == PAIR0_HEADER, got
    except BaseException:
        s.close()
        raise
    return s


def _refused(address: str) -> socket.socket:
    """A raw socket to ``address`` that sends nothing (the listener may close it at once)."""
    family, where = _sockaddr(address)
    s = socket.socket(family)
    try:
        s.settimeout(scaled(10))
        s.connect(where)
    except BaseException:
        s.close()
        raise
    return s


def _closed_by_peer(s: socket.socket, timeout: float) -> bool:
    s.settimeout(max(0.001, timeout))
    try:
        while s.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def _settle(socks: list[socket.socket], cap: int, timeout: float) -> list[int]:
    """Indexes of ``socks`` still open once at most ``cap`` are (or ``timeout`` s passed).

    The listener adds the last pipes asynchronously, after their sockets got its header:
    wait on the oldest open socket until the count settles.
    """
    deadline = time.monotonic() + timeout
    while True:
        open_now = [i for i, s in enumerate(socks) if not closed_now(s)]
        left = deadline - time.monotonic()
        if len(open_now) <= cap or left <= 0:
            return open_now
        _closed_by_peer(socks[open_now[0]], min(left, 0.1))


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as es:
        yield es


def _target(stack: contextlib.ExitStack, kind: str, *, timeout: float,
            max_pending: int = DEFAULT_PENDING) -> PreAuthTarget:
    """A listening child: a kernel router on nng with ``auth_timeout=timeout``, ``max_unauthenticated=max_pending``."""
    target = PreAuthTarget(FACTORY, _listen_address(kind), SECRET, timeout=timeout, max_pending=max_pending,
                           start_timeout=scaled(30))
    stack.callback(target.close, scaled(10))
    return target


def _peer(stack: contextlib.ExitStack, name: str) -> PreAuthPeer:
    peer = PreAuthPeer(FACTORY, SECRET, name=name)
    stack.callback(peer.close)
    return peer


def _strangers(stack: contextlib.ExitStack, address: str, n: int, opening: str = "header") -> list[socket.socket]:
    socks = [_stranger(address, opening) for _ in range(n)]
    stack.callback(lambda: [s.close() for s in socks])
    return socks


@pytest.mark.parametrize("opening", OPENINGS)
@pytest.mark.parametrize("kind", ADDRESSES)
def test_half_open_connections_are_closed_at_the_deadline(stack: contextlib.ExitStack, kind: str, opening: str) -> None:
    timeout = 0.5
    target = _target(stack, kind, timeout=timeout)
    started = time.monotonic()
    socks = _strangers(stack, target.address, 10, opening)
    left_open = still_open(socks, timeout + scaled(5))
    assert not left_open, f"{opening} strangers that then said nothing outlived the deadline: {left_open}"
    assert time.monotonic() - started >= timeout * 0.9, "closed before the deadline"
    _peer(stack, "friend").send(target.address, "after")
    target.wait_served(1, scaled(10), "a peer after the deadline")


@pytest.mark.parametrize("opening", OPENINGS)
@pytest.mark.parametrize("kind", ADDRESSES)
def test_past_the_cap_the_oldest_half_open_connections_are_closed(
        stack: contextlib.ExitStack, kind: str, opening: str) -> None:
    cap, n = 16, 80
    target = _target(stack, kind, timeout=scaled(60), max_pending=cap)
    socks = _strangers(stack, target.address, n, opening)
    # Pipes are added in connection order but asynchronously: allow a little reordering.
    slack = 4
    left_open = still_open(socks[: n - cap - slack], scaled(10))
    assert not left_open, f"past a cap of {cap}, the oldest strangers were kept: {left_open}"
    open_now = _settle(socks, cap, scaled(10))
    assert len(open_now) == cap, f"expected the newest {cap} strangers open, found {open_now}"
    assert all(i >= n - cap - slack for i in open_now), open_now
    _peer(stack, "friend").send(target.address, "real peer")
    target.wait_served(1, scaled(10), "a real peer while the newest strangers wait")


@pytest.mark.parametrize("kind", ADDRESSES)
def test_a_real_peer_is_served_quickly_during_a_flood(stack: contextlib.ExitStack, kind: str) -> None:
    """The issue's reproduction, bounded: hundreds of half-open connections (silent ones and
    ones that sent nng's header, alternately) while real peers come and go."""
    cap, n = 32, 400
    target = _target(stack, kind, timeout=scaled(60), max_pending=cap)
    friend = _peer(stack, "friend")
    sent = 0
    socks: list[socket.socket] = []
    stack.callback(lambda: [s.close() for s in socks])
    for i in range(n):
        socks.append(_stranger(target.address, OPENINGS[i % 2]))
        if i % 100 == 99:
            newcomer = _peer(stack, f"newcomer-{i}")
            started = time.monotonic()
            newcomer.send(target.address, f"newcomer {i}")
            friend.send(target.address, f"friend {i}")
            sent += 2
            target.wait_served(sent, scaled(10), f"a newcomer and a friend after {i + 1} strangers")
            assert time.monotonic() - started < scaled(5), "a real peer waited behind the strangers"
    # Silent strangers wait in the transport's gate, the others in the kernel: a cap each.
    for first, opening in enumerate(OPENINGS):
        mine = socks[first::2]
        open_now = still_open(mine[: len(mine) - cap - 4], scaled(10))
        assert not open_now, f"{len(open_now)} of the oldest {opening} strangers are still open (cap {cap})"
    assert len(_settle(socks, 2 * cap, scaled(10))) <= 2 * cap


def test_connections_past_the_limit_are_refused_with_a_log_line(
        stack: contextlib.ExitStack, caplog: pytest.LogCaptureFixture) -> None:
    limit = 6
    server_t, client_t = NngTransport(), NngTransport()
    stack.callback(client_t.close)
    stack.callback(server_t.close)
    server_t.limit_unauthenticated(PreAuthLimits(timeout=scaled(60), max_connections=limit))
    srec = Recorder()
    listener = server_t.listen(server_t.default_address(spans_hosts=False), srec)
    stack.callback(listener.close)
    # A stranger waits; real connections arriving later close it when they need its room.
    early = _strangers(stack, listener.address, 1, "silent")
    conns = [client_t.connect(listener.address, Recorder(), timeout=scaled(10)) for _ in range(limit)]
    srec.wait(lambda: len(srec.opened) == limit, f"{limit} opened connections")
    assert _closed_by_peer(early[0], scaled(5)), "a waiting stranger kept its room from a real peer"
    with caplog.at_level(logging.WARNING, logger="tetrarch.transport.nng"):
        late = [_refused(listener.address) for _ in range(3)]
        stack.callback(lambda: [s.close() for s in late])
        left_open = still_open(late, scaled(5))
    assert not left_open, f"connections past the limit of {limit} were kept: {left_open}"
    assert any("refused" in r.getMessage() for r in caplog.records), caplog.text
    started = time.monotonic()
    with pytest.raises(TransportError, match="connection limit"):
        client_t.connect(listener.address, Recorder(), timeout=scaled(10))
    assert time.monotonic() - started < scaled(5), "a refused dial waited for its timeout"
    conns[0].close()
    srec.wait_any_closed()  # the listener's accept order need not be conns' order
    again = client_t.connect(listener.address, Recorder(), timeout=scaled(10))
    again.send([b"in again"])
    assert [[bytes(f) for f in m] for m in srec.wait_messages(srec.wait_opened(limit + 1), 1)] == [[b"in again"]]


def test_strangers_that_open_stay_within_half_the_open_file_limit() -> None:
    """A stranger that sends nng's header opens (the kernel then waits for its proof) and holds
    three descriptors (its stream, nng's notification pipe): under the default connection cap
    a flood of them must not take the listening process's descriptors beyond half its limit."""
    nofile, n = 1024, 700
    if raise_open_file_limit() < n + 256:
        pytest.skip(f"this test process may not open {n + 256} files (RLIMIT_NOFILE)")
    name = f"tetrarch-nng-openers-{time.monotonic_ns()}"
    target = PreAuthTarget(FACTORY, f"nng+ipc://@{name}", SECRET, timeout=scaled(60), max_pending=4 * nofile,
                           nofile=nofile, start_timeout=scaled(30))
    socks: list[socket.socket] = []
    try:
        family, where = _sockaddr(target.address)
        peak = 0
        for i in range(n):
            s = socket.socket(family)
            socks.append(s)
            s.settimeout(scaled(10))
            s.connect(where)
            s.sendall(PAIR0_HEADER)
            if i % 50 == 49:
                peak = max(peak, len(os.listdir(f"/proc/{target.pid}/fd")))
        for s in socks:  # each got nng's header (handed to nng) or was closed at once (refused)
            with contextlib.suppress(ConnectionResetError):  # closed with our header unread
                s.recv(8, socket.MSG_WAITALL)
        peak = max(peak, len(os.listdir(f"/proc/{target.pid}/fd")))
        assert target.alive(), target.describe()
        assert peak <= nofile // 2 + 64, f"{n} strangers that opened took {peak} descriptors; {target.describe()}"
        assert "refused" in target.stderr(), target.describe()
    finally:
        for s in socks:
            s.close()
        target.close(scaled(10))
