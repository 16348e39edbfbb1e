"""Shared helpers for plugin transports: qualified addresses, the I/O thread's call queue, the loop's lifecycle."""

from __future__ import annotations

import gc
import os
import select
import subprocess
import sys
import textwrap
import threading

import pytest

from tetrarch.plugins import CallQueue, IoLoop, QualifiedAddress, fresh_ipc_name, parse_qualified
from tetrarch.testing import scaled


@pytest.mark.parametrize(
    ("address", "parsed", "native"),
    [
        ("zmq+tcp://127.0.0.1:0", QualifiedAddress("zmq", "tcp", host="127.0.0.1"), "tcp://127.0.0.1:0"),
        ("nng+tcp://[::1]:5555", QualifiedAddress("nng", "tcp", host="::1", port=5555), "tcp://[::1]:5555"),
        ("zmq+ipc:///tmp/x.sock", QualifiedAddress("zmq", "ipc", path="/tmp/x.sock"), "ipc:///tmp/x.sock"),
        ("zmq+ipc://@name", QualifiedAddress("zmq", "ipc", path="@name"), "ipc://@name"),
    ],
)
def test_qualified_addresses_parse(address: str, parsed: QualifiedAddress, native: str) -> None:
    got = parse_qualified(address, parsed.backend)
    assert got == parsed
    assert got.native() == native


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("tcp://127.0.0.1:1", "expected zmq+tcp://HOST:PORT"),  # plain: another transport's address
        ("nng+tcp://127.0.0.1:1", "expected zmq+tcp://HOST:PORT"),
        ("zmq+tcp://127.0.0.1", "must look like zmq+tcp://HOST:PORT"),
        ("zmq+tcp://:80", "must look like zmq+tcp://HOST:PORT"),
        ("zmq+tcp://h:99999", "must look like zmq+tcp://HOST:PORT"),
        ("zmq+ipc://", "must look like zmq+ipc:///PATH"),
        ("zmq+udp://h:1", "serves tcp and ipc, not 'udp'"),
        ("not an address", "expected zmq+tcp://HOST:PORT"),
    ],
)
def test_malformed_addresses_name_the_expected_form(address: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("+", r"\+").replace("(", r"\(")):
        parse_qualified(address, "zmq")


def test_fresh_ipc_names_differ() -> None:
    assert fresh_ipc_name("zmq") != fresh_ipc_name("zmq")


def _polling_thread(queue: CallQueue, stop: threading.Event) -> threading.Thread:
    """A started thread that owns ``queue`` and runs its calls whenever its descriptor wakes it, until ``stop``.

    It waits on the descriptor alone, with no timeout of its own doing the work: a lost wake-up
    leaves calls unrun (the 1 s poll timeout only rechecks ``stop``; it runs nothing).
    """

    def loop() -> None:
        queue.bind()
        poller = select.poll()
        poller.register(queue.fileno(), select.POLLIN)
        while not stop.is_set():
            if poller.poll(1000):
                queue.run_pending()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(scaled(30))
def test_call_queue_runs_calls_in_order_on_the_polling_thread() -> None:
    queue = CallQueue()
    ran: list[tuple[int, int]] = []
    done = threading.Event()
    thread = _polling_thread(queue, done)
    senders = [
        threading.Thread(target=lambda t=t: [queue.call(lambda i=i: ran.append((t, i))) for i in range(1000)])
        for t in range(3)
    ]
    for s in senders:
        s.start()
    for s in senders:
        s.join()
    queue.call(done.set)
    thread.join(scaled(10))
    assert not thread.is_alive(), "the loop never ran the last call: a wake-up was lost"
    for t in range(3):
        assert [i for u, i in ran if u == t] == list(range(1000))
    queue.close()
    queue.close()


@pytest.mark.timeout(scaled(60))
def test_call_queue_never_loses_a_wake_up_under_ping_pong() -> None:
    """Threads each post a call and wait for it, thousands of times: every one must run.

    Posting and waiting one call at a time makes the loop consume wake-ups while others
    are written, the window where an early disarm lost them (the loop then slept on calls
    it never ran: a zmq connection's queued sends stalled and a proc lost its owner).
    """
    queue = CallQueue()
    stop = threading.Event()
    thread = _polling_thread(queue, stop)
    lost: list[int] = []

    def sender(n: int) -> None:
        for i in range(n):
            ran = threading.Event()
            queue.call(ran.set)
            if not ran.wait(scaled(5)):
                lost.append(i)
                return

    senders = [threading.Thread(target=sender, args=(5000,)) for _ in range(4)]
    for s in senders:
        s.start()
    for s in senders:
        s.join(scaled(40))
    stop.set()
    queue.call(lambda: None)
    thread.join(scaled(10))
    queue.close()
    assert not lost, f"posted calls never ran (lost wake-ups) after {lost} round trips"


class _Standby:
    """The least a standby is to the loop (the runtime's is ``_runtime/actors/_standby.py``)."""

    watching = True

    def rewatch(self) -> None:
        pass


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.timeout(scaled(30))
def test_a_stopped_loop_takes_late_calls_and_closes_its_descriptors_when_dropped() -> None:
    """An actor's thread may end after the transport's loop did (nng closes its loop at exit):
    detaching its standby then must not raise. The loop's descriptors stay valid until the loop
    object goes (a number closed early could name another socket when a late wake-up writes to it)."""
    before = _open_fds()
    for i in range(20):
        loop = IoLoop(f"lifecycle-{i}")
        standby = _Standby()
        assert loop.attach_standby(standby)  # type: ignore[arg-type]
        loop.stop()
        assert loop.stopped and not loop.thread.is_alive()
        os.fstat(loop.queue.fileno())  # still open: a thread posting a call now writes to it, not elsewhere
        loop.call(lambda: None)
        loop.standby_busy()  # arms the standby's timer
        loop.detach_standby(standby)  # type: ignore[arg-type]  # wakes the (ended) I/O thread
        del loop, standby
    gc.collect()
    assert _open_fds() <= before, "stopped loops left descriptors open once dropped"


_EXIT_STOP = textwrap.dedent("""
    import atexit, time
    from tetrarch.plugins import IoLoop

    def stop() -> None:  # like a plugin's exit hook, registered before the loop exists
        start = time.monotonic()
        loop.stop(wait=10)
        print("STOPPED", loop.thread.is_alive(), round(time.monotonic() - start, 2))

    atexit.register(stop)
    loop = IoLoop("at-exit")
""")


@pytest.mark.timeout(scaled(60))
def test_a_loop_still_running_at_exit_stops_when_an_exit_hook_asks() -> None:
    """Exit hooks run before the loop object is dropped; the loop's descriptors must still work
    then (weakref.finalize closes at exit unless told not to: the wake-up descriptor was closed,
    so the I/O thread slept on for good, and nng's exit hook waited its whole timeout for it)."""
    res = subprocess.run([sys.executable, "-c", _EXIT_STOP], capture_output=True, text=True,
                         timeout=scaled(50), check=False)
    assert res.returncode == 0, res.stderr
    _, alive, took = res.stdout.split()
    assert alive == "False", f"the I/O thread was still running after stop() ({took} s): {res.stderr}"
