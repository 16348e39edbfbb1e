"""Threads blocked in ``Future.get`` read for the transport's I/O loop (leaders and followers).

What a user relies on, whoever reads: every waiting thread gets its reply, replies nobody
waits for still arrive (callbacks fire), a future completed by another thread wakes its
waiter at once, and timeouts stay timeouts. Each test runs with a leader that sleeps at once
and with one that polls first (``TETRARCH_SPIN_US``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from order_actors import WAIT_S, Gate
from tetrarch import Future
from tetrarch._runtime.values import _future
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


@pytest.fixture(autouse=True, params=[0, 200], ids=["sleep", "spin200us"])
def spin_us(request: pytest.FixtureRequest, gates) -> Iterator[int]:
    """How long this process's waiting threads poll before they sleep (the router read the setting)."""
    loop = _future._loop
    assert loop is not None
    before = loop.spin_s
    loop.spin_s = request.param / 1e6
    yield request.param
    loop.spin_s = before


@pytest.fixture(scope="module")
def gates(procs):
    return procs.spawn("waiting_gates", Gate)


def test_many_threads_waiting_at_once_all_get_their_replies(gates):
    """One thread leads, the others sleep as followers; leadership changes hands as replies land."""
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            results[i] = [gates.slice(gpus=i % 4).value.call_one(i * 1000 + k).get(timeout=WAIT_S)
                          for k in range(50)]
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    assert results == {i: [i * 1000 + k for k in range(50)] for i in range(6)}


def test_a_reply_nobody_waits_for_still_arrives(gates):
    """After a thread led the loop and left, the I/O thread takes it back: callbacks fire
    without anyone calling ``get``."""
    gate = gates.slice(gpus=1)
    for k in range(20):  # the main thread leads these
        assert gate.value.call_one(k).get(timeout=WAIT_S) == k
    arrived = threading.Event()
    gate.value.call_one("unwatched").add_done_callback(lambda _f: arrived.set())
    assert arrived.wait(WAIT_S)


def test_a_waiter_that_leads_wakes_when_another_thread_completes_its_future(gates):
    """The completion happens off the loop (no message): the leading waiter is kicked out of its wait."""
    assert gates.slice(gpus=0).value.call_one(1).get(timeout=WAIT_S) == 1  # the loop exists
    fut: Future[str] = Future._new()
    threading.Timer(0.05, fut._set_result, args=("done",)).start()
    assert fut.get(timeout=WAIT_S) == "done"


def test_a_follower_times_out_and_its_future_still_completes_later(gates):
    gate = gates.slice(gpus=2)
    held = gate.hold.call_one()
    outcome: dict[str, object] = {}

    def follower() -> None:
        try:
            held.get(timeout=0.2)
        except TimeoutError as exc:
            outcome["timeout"] = exc

    # Both threads wait at once (one leads, the other follows); the shorter wait times out first.
    lead = gate.hold.call_one()
    t = threading.Thread(target=follower)
    t.start()
    with pytest.raises(TimeoutError):
        lead.get(timeout=scaled(0.5))
    t.join(WAIT_S)
    assert isinstance(outcome.get("timeout"), TimeoutError)
    assert gate.release.call_one("both").get(timeout=WAIT_S) == 2
    assert held.get(timeout=WAIT_S) == "both"
    assert lead.get(timeout=WAIT_S) == "both"


def test_a_polling_leader_keeps_to_its_timeout_and_still_gets_a_later_reply(gates, spin_us):
    """Polling never outlasts ``get``'s timeout, and a reply that comes after the polling
    (the leader sleeps by then) still wakes it."""
    loop = _future._loop
    assert loop is not None
    gate = gates.slice(gpus=3)
    held = gate.hold.call_one()
    loop.spin_s = 10.0  # far longer than the timeout below
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        held.get(timeout=0.2)
    assert time.monotonic() - start < scaled(5), "the leader polled past its timeout"
    loop.spin_s = spin_us / 1e6
    threading.Timer(0.05, lambda: gate.release.call_one("late")).start()  # after a 200 us poll ends
    assert held.get(timeout=WAIT_S) == "late"
