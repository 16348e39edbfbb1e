"""zmq's stage before OPEN is held to the kernel's bounds on strangers (issue 28, items 4, 5, 10).

The conformance kit (``PreAuthConformance``, run by test_conformance.py) checks what any
transport owes: deadlines, the pending cap, memory per stalled stranger, a flood against an
open-file limit of 1024. These are the zmq-specific parts: a peer that has the key (so it gets
past libzmq's handshake) but never says OPEN; the connection cap and its log line; the
descriptor-reuse guard that closing one peer through its descriptor relies on; and a dial
into a Unix socket whose backlog is full.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq
from zmq.utils.monitor import parse_monitor_message

from tetrarch.plugins import PreAuthLimits, Transport
from tetrarch.testing import closed_now, scaled
from tetrarch.testing.transport import Recorder
from tetrarch_transport_zmq._plugin import probe

pytestmark = [pytest.mark.skipif(not probe().ok, reason=probe().reason), pytest.mark.timeout(scaled(90))]

KEY = bytes(range(32))


@pytest.fixture
def make() -> Iterator[Callable[..., Transport]]:
    from tetrarch_transport_zmq._zmq import ZmqTransport

    made: list[Transport] = []

    def new(limits: PreAuthLimits | None = None) -> Transport:
        t = ZmqTransport()
        t.use_key(KEY)
        if limits is not None:
            t.limit_unauthenticated(limits)
        made.append(t)
        return t

    yield new
    for t in made:
        t.close()


def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``check`` (state in libzmq or the kernel: nothing to wait on) until it holds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        pause.wait(0.01)


def _unix(address: str) -> socket.socket:
    """A raw Unix-socket connection to a ``zmq+ipc://`` listener."""
    path = address[len("zmq+ipc://"):]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + path[1:] if path.startswith("@") else path)
    return s


def test_a_peer_with_the_key_that_never_says_open_is_closed_at_the_deadline(make: Any) -> None:
    """libzmq's handshake ends once the key checks out; the gate's own deadline covers what
    follows. Before: the connection stayed (ZMTP heartbeats kept it alive) for good."""
    from tetrarch_transport_zmq._zap import password_of, secure_client

    timeout = scaled(1.0)
    server = make(PreAuthLimits(timeout=timeout))
    srec = Recorder()
    listener = server.listen(server.default_address(spans_hosts=False), srec)
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.RECONNECT_IVL, 60_000)  # one connection: no reconnect within the test
    secure_client(dealer, password_of(KEY))
    monitor = dealer.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
    try:
        dealer.connect(listener.address.removeprefix("zmq+"))  # and never sends OPEN
        seen: list[int] = []
        deadline = time.monotonic() + timeout + scaled(5)
        while zmq.EVENT_DISCONNECTED not in seen and time.monotonic() < deadline:
            if monitor.poll(50):
                seen.append(parse_monitor_message(monitor.recv_multipart())["event"])
        assert zmq.EVENT_HANDSHAKE_SUCCEEDED in seen, f"the key was refused: nothing was tested ({seen})"
        assert zmq.EVENT_DISCONNECTED in seen, (
            f"a peer that passed zmq's handshake but never said OPEN was still connected "
            f"{timeout + scaled(5):g} s later (timeout {timeout:g} s)")
        assert srec.opened == []
    finally:
        dealer.disable_monitor()
        monitor.close(0)
        dealer.close(0)
        ctx.term()
    make().connect(listener.address, Recorder(), timeout=scaled(10)).send([b"after"])
    assert [bytes(f) for f in srec.wait_messages(srec.wait_opened(), 1)[0]] == [b"after"]


def test_connections_past_the_cap_are_refused_newest_first_with_a_log_line(
        make: Any, caplog: pytest.LogCaptureFixture) -> None:
    cap, extra = 16, 4
    server = make(PreAuthLimits(timeout=scaled(60), max_pending=64, max_connections=cap))
    listener = server.listen(server.default_address(spans_hosts=False), Recorder())
    strangers: list[socket.socket] = []
    try:
        with caplog.at_level(logging.WARNING, logger="tetrarch"):
            for _ in range(cap):
                strangers.append(_unix(listener.address))
            late = [_unix(listener.address) for _ in range(extra)]
            strangers += late
            _until(lambda: all(closed_now(s) for s in late), scaled(10),
                   f"the {extra} connections past a cap of {cap} to be closed")
            assert not any(closed_now(s) for s in strangers[:cap]), "a connection under the cap was closed"
            _until(lambda: any("refused" in r.getMessage() for r in caplog.records), scaled(10), "the log line")
        # A real peer is refused too while the cap is full, and gets in once strangers leave.
        for s in strangers:
            s.close()
        strangers.clear()
        _until(lambda: _dials(make, listener.address), scaled(10), "a dial to succeed after the strangers left")
    finally:
        for s in strangers:
            s.close()


def _dials(make: Any, address: str) -> bool:
    try:
        make().connect(address, Recorder(), timeout=scaled(5)).close()
    except Exception:  # noqa: BLE001 - refused while the listener still counts the strangers
        return False
    return True


def test_the_gate_never_shuts_down_a_socket_that_took_a_recorded_number() -> None:
    """Closing a peer goes through its descriptor number: a number reused by another socket
    since it was recorded must be left alone, the recorded socket shut down."""
    from tetrarch_transport_zmq._gate import _identity, shut_down

    a, b = socket.socketpair()
    c, d = socket.socketpair()
    try:
        fd = a.fileno()
        recorded = _identity(fd)
        assert recorded is not None
        a.close()  # the number is free ...
        os.dup2(c.fileno(), fd)  # ... and taken by another socket
        try:
            assert not shut_down(fd, recorded), "shut down a socket that was not the recorded one"
            c.sendall(b"still")
            assert d.recv(5) == b"still"
            assert shut_down(fd, _identity(fd))
            assert d.recv(5) == b"", "the recorded socket was not shut down"
        finally:
            os.close(fd)
    finally:
        for s in (b, c, d):
            s.close()


def test_an_open_read_after_its_peers_hang_up_opens_nothing() -> None:
    """A peer that said OPEN and hung up before the listener read the OPEN: the listener reads
    the hang-up first (the monitor before the socket), and must not open a connection that
    nothing would ever report lost (it counted such an OPEN as a new connection)."""
    from tetrarch_transport_zmq._gate import Gate

    gate = Gate(PreAuthLimits(), "test", lambda: 0)
    a, b = socket.socketpair()
    try:
        gate.accepted(a.fileno(), time.monotonic())
        gate.disconnected(a.fileno())
        assert gate.opened(a.fileno()) is None
        assert len(gate) == 0
        gate.accepted(a.fileno(), time.monotonic())  # a new peer on that descriptor opens as usual
        assert gate.opened(a.fileno()) is not None
    finally:
        a.close()
        b.close()


# A listener in its own process (so it can be stopped): prints its address, then waits for stdin's end.
_LISTENER = r"""
import sys
from tetrarch.testing.transport import Recorder
from tetrarch_transport_zmq._zmq import ZmqTransport
t = ZmqTransport()
t.use_key(bytes(range(32)))
print(t.listen(t.default_address(spans_hosts=False), Recorder()).address, flush=True)
sys.stdin.read()
"""


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop ``proc`` and return once every thread of it has stopped.

    ``kill(SIGSTOP)`` returns before that: the kernel wakes one thread to take the signal and
    the others stop only once it ran. On a loaded machine the listener's I/O thread went on
    accepting for a while, so the backlog filled below had room again by the time the dial
    came (the dial then connected, and waited for a greeting that never came).
    ``waitpid(WUNTRACED)`` reports the stop once the whole process has stopped.
    """
    os.kill(proc.pid, signal.SIGSTOP)
    pid, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert pid == proc.pid and os.WIFSTOPPED(status), f"the listener did not stop (wait status {status:#x})"


def test_a_dial_into_a_full_backlog_waits_for_room(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 10: a Unix socket's connect fails with EAGAIN while the listener's backlog is full;
    libzmq reports that as a retry, which the dial took for 'nobody listens'."""
    import tetrarch_transport_zmq._dial as dial_module

    real = getattr(dial_module, "backlog_full", lambda native: False)
    probed = threading.Event()
    answers: list[bool] = []

    def spy(native: str) -> bool:
        answers.append(real(native))
        probed.set()
        return answers[-1]

    monkeypatch.setattr(dial_module, "backlog_full", spy, raising=False)
    proc = subprocess.Popen([sys.executable, "-c", _LISTENER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    queued: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        _stop(proc)
        path = address[len("zmq+ipc://"):]
        while True:  # fill its backlog: connects queue until it is full
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect("\0" + path[1:])
            except BlockingIOError:
                s.close()
                break
            queued.append(s)
            assert len(queued) < 10_000, "the backlog never filled"
        outcome: list[BaseException | None] = []

        def dial() -> None:
            try:
                make().connect(address, Recorder(), timeout=scaled(20))
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - reported below
                outcome.append(exc)

        dialer = threading.Thread(target=dial)
        started = time.monotonic()
        dialer.start()
        _until(lambda: bool(outcome) or probed.is_set(), scaled(10), "the dial to meet the full backlog")
        assert not outcome, f"the dial failed {time.monotonic() - started:.2f} s in: {outcome[0]!r}"
        assert answers[0], "the dial's probe did not find the backlog full"
        os.kill(proc.pid, signal.SIGCONT)
        dialer.join(scaled(25))
        assert outcome == [None], f"the dial failed once the listener had room: {outcome!r}"
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        for s in queued:
            s.close()
        proc.kill()
        proc.wait()
