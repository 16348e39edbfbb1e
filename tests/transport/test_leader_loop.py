"""The transport loop's hand-offs between its I/O thread and the threads that wait (docs/architecture.md,
"The transport loop"), on a bare ``IoLoop``: no process, no socket."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import pytest

from tetrarch._runtime.values import _future
from tetrarch._runtime.values._future import Future
from tetrarch.plugins import IoLoop
from tetrarch.testing import scaled

# A bare loop in this process: no transport for the suite to swap.
pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(60))]


@pytest.fixture
def loop() -> Iterator[IoLoop]:
    lp = IoLoop("leader-loop-test")
    try:
        yield lp
    finally:
        lp.stop(wait=scaled(5))


def _until(cond, what: str) -> None:
    end = time.monotonic() + scaled(5)
    while not cond():
        assert time.monotonic() < end, f"timed out waiting until {what}"
        time.sleep(0.0005)


def _run_in_loop(loop: IoLoop) -> None:
    """Post a call and wait until whoever reads for the loop ran it."""
    ran = threading.Event()
    loop.call(ran.set)
    assert ran.wait(scaled(5))


def test_a_take_back_reads_before_the_io_thread_steps_aside_again(loop: IoLoop) -> None:
    """A follower served by a leader leaves its request (step aside) behind; the I/O thread that
    takes the loop back later, for a call posted while nobody reads, runs that call first instead
    of stepping aside again at once (which left the call waiting another LEASE_S)."""
    events: list[str] = []
    step_aside = loop._step_aside

    def recording() -> bool:
        events.append("aside")
        return step_aside()

    loop._step_aside = recording  # type: ignore[method-assign]  # _run looks it up per turn
    _run_in_loop(loop)  # the I/O thread reads now
    assert loop.follow()  # it reads: this thread is counted as a follower...
    loop.followed()  # ...and served at once; its request stays
    _run_in_loop(loop)  # a turn: then the I/O thread steps aside
    _until(lambda: loop._parked, "the I/O thread parked")

    # A leader (this thread) serves a follower: the request is left behind, nobody reads.
    _until(loop.try_lead, "this thread leads")  # the parked thread holds the loop for a moment at its checks
    assert loop.follow()  # this thread reads already: counted, asks the I/O thread to step aside
    loop.followed()
    loop.leave()
    mark = len(events)
    ran = threading.Event()

    def posted() -> None:
        events.append("ran")
        ran.set()

    loop.call(posted)  # nobody reads: unparks the I/O thread
    assert ran.wait(scaled(5))
    assert events[mark:][:1] == ["ran"], f"the I/O thread stepped aside again before it read: {events[mark:]}"


def test_waiters_leading_and_following_all_get_their_results(loop: IoLoop) -> None:
    """Threads waiting in Future.get at once lead and follow in turn; results come in the loop
    (a posted call) or from another thread (which kicks the leader). Every wait ends, and the
    followers' count goes back to zero."""
    before = _future._loop
    _future.use_loop(loop)
    jobs: queue.Queue[tuple[Future, int] | None] = queue.Queue()
    failures: list[str] = []

    def replier() -> None:
        n = 0
        while (job := jobs.get()) is not None:
            fut, value = job
            n += 1
            if n % 3 == 0:
                fut._set_result(value)  # off the loop: a leader waiting for it is kicked
            else:
                loop.call(lambda fut=fut, value=value: fut._set_result(value))

    def waiter(k: int) -> None:
        for i in range(250):
            fut: Future[int] = Future._new()
            if i % 2:
                fut._poll = True  # a leader polls first, as for a single reply
            jobs.put((fut, k * 1000 + i))
            try:
                got = fut.get(timeout=scaled(10))
            except Exception as exc:  # noqa: BLE001 - reported below
                failures.append(f"waiter {k}, round {i}: {exc!r}")
                return
            if got != k * 1000 + i:
                failures.append(f"waiter {k}, round {i}: got {got}")
                return

    loop.spin_s = 50e-6
    repliers = [threading.Thread(target=replier) for _ in range(2)]
    waiters = [threading.Thread(target=waiter, args=(k,)) for k in range(4)]
    try:
        for t in repliers + waiters:
            t.start()
        for t in waiters:
            t.join(scaled(40))
        assert not any(t.is_alive() for t in waiters), "a waiter is still waiting"
        assert not failures, failures
        assert loop._followers == 0
    finally:
        for _ in repliers:
            jobs.put(None)
        for t in repliers:
            t.join(scaled(5))
        _future.use_loop(before)
