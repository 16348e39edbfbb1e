"""``Future`` semantics: timeouts, caching, asyncio from any thread, blocking inside actors."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

from order_actors import WAIT_S, Blocker, Gate
from tetrarch import ActorError, Future
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


@pytest.fixture(scope="module")
def gates(procs):
    return procs.spawn("future_gates", Gate)


def _in_thread(fn):
    """Run ``fn()`` in a new thread; return what it returned (or raise what it raised)."""
    out: dict[str, object] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            out["error"] = exc

    t = threading.Thread(target=body)
    t.start()
    t.join(WAIT_S)
    assert not t.is_alive(), "the thread did not finish"
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]


@pytest.mark.transport_independent  # pure: no process
def test_future_is_not_constructible_by_users():
    with pytest.raises(TypeError, match="cannot be constructed"):
        Future()


def test_get_timeout_raises_without_consuming(gates):
    gate = gates.slice(gpus=0)
    fut = gate.hold.call_one()
    with pytest.raises(TimeoutError):
        fut.get(timeout=0.05)
    assert not fut.done()
    with pytest.raises(TimeoutError):
        fut.get(timeout=0)  # a zero timeout polls
    with pytest.raises(TimeoutError):
        fut.exception(timeout=0)
    assert gate.release.call_one("late").get(timeout=WAIT_S) == 1
    assert fut.get(timeout=WAIT_S) == "late"
    assert fut.done()
    assert fut.get(timeout=0) == "late"  # done: a zero timeout is fine now


def test_get_rejects_a_bad_timeout(gates):
    fut = gates.slice(gpus=0).hold.call_one()
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout"):
            fut.get(timeout=bad)
    gates.slice(gpus=0).release.call_one(None).get(timeout=WAIT_S)
    assert fut.get(timeout=WAIT_S) is None


def test_results_are_cached_and_decoded_once(gates):
    fut = gates.slice(gpus=1).value.call_one({"k": [1, 2, 3]})
    first = fut.get(timeout=WAIT_S)
    assert first == {"k": [1, 2, 3]}
    assert fut.get() is first and fut.result() is first  # the same object, not a re-decode
    assert fut.exception() is None
    mesh_fut = gates.value.call([0])
    values = mesh_fut.get(timeout=WAIT_S)
    assert mesh_fut.get() is values and values.values() == [[0]] * 4


def test_exceptions_are_cached_and_reraised_as_the_same_object(gates):
    fut = gates.slice(gpus=2).boom.call_one("kaboom")
    with pytest.raises(ActorError) as first:
        fut.get(timeout=WAIT_S)
    with pytest.raises(ActorError) as second:
        fut.get()
    assert first.value is second.value
    assert isinstance(first.value.exception, ValueError) and "kaboom" in str(first.value)
    assert fut.exception() is first.value  # the accessor returns it instead of raising
    assert fut.done()


def test_exception_accessor_waits_for_the_outcome(gates):
    gate = gates.slice(gpus=3)
    fut = gate.hold.call_one()
    box: list[object] = []
    waiter = threading.Thread(target=lambda: box.append(fut.exception(timeout=WAIT_S)))
    waiter.start()
    gate.release.call_one("ok").get(timeout=WAIT_S)
    waiter.join(WAIT_S)
    assert not waiter.is_alive() and box == [None]


def test_await_from_loops_in_other_threads(gates):
    """A pending future awaited from two loops in two threads (not the caller's thread)."""
    gate = gates.slice(gpus=0)
    fut = gate.hold.call_one()
    started = threading.Barrier(3, timeout=WAIT_S)

    async def waiting() -> tuple[object, int]:
        loop = asyncio.get_running_loop()
        started.wait()  # both loops run before the result exists
        value = await asyncio.wait_for(fut, WAIT_S)
        assert asyncio.get_running_loop() is loop
        return value, threading.get_ident()

    results: list[object] = []
    errors: list[BaseException] = []

    def run_loop() -> None:
        try:
            results.append(asyncio.run(waiting()))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run_loop) for _ in range(2)]
    for t in threads:
        t.start()
    started.wait()
    assert not fut.done()
    assert gate.release.call_one("both").get(timeout=WAIT_S) == 1
    for t in threads:
        t.join(WAIT_S)
        assert not t.is_alive()
    assert not errors, errors
    assert sorted(v for v, _ in results) == ["both", "both"]
    assert len({ident for _, ident in results}) == 2
    assert all(ident != threading.get_ident() for _, ident in results)


def test_await_in_another_thread_of_a_done_future_and_of_an_error(gates):
    done = gates.slice(gpus=1).value.call_one(5)
    assert done.get(timeout=WAIT_S) == 5
    failing = gates.slice(gpus=1).boom.call_one("async side")

    async def main() -> tuple[int, BaseException]:
        value = await done
        try:
            await failing
        except ActorError as exc:
            return value, exc
        raise AssertionError("awaiting a failed call did not raise")

    value, error = _in_thread(lambda: asyncio.run(main()))
    assert value == 5 and "async side" in str(error)
    with pytest.raises(ActorError) as again:
        failing.get()
    assert again.value is error  # the same cached exception through await and get


def test_get_inside_an_async_endpoint_warns(procs):
    blocker = procs.spawn("future_warner", Blocker).slice(gpus=0)
    seen = blocker.get_in_async.call_one().get(timeout=WAIT_S)
    assert len(seen) == 1, seen
    assert seen[0].startswith("UserWarning:") and "await" in seen[0]
    assert blocker.get_in_sync.call_one().get(timeout=WAIT_S) == []  # no loop visible in sync endpoints


@pytest.mark.transport_independent  # pure: no process
def test_get_on_the_client_inside_a_running_loop_does_not_warn():
    # A notebook cell, code under asyncio.run: the result never comes through this loop, so
    # blocking it cannot deadlock (Monarch warns here; tetrarch only warns on an actor's loop).
    import warnings

    from tetrarch import Channel

    _port, receiver = Channel.open()
    fut = receiver.recv()

    async def main() -> list[warnings.WarningMessage]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with pytest.raises(TimeoutError):
                fut.get(timeout=0.01)
        return seen

    assert asyncio.run(main()) == []
    receiver.close()


def test_get_on_the_client_inside_a_running_loop_returns_the_result(gates):
    async def main() -> int:
        return gates.slice(gpus=2).value.call_one(7).get(timeout=WAIT_S)

    assert asyncio.run(main()) == 7


def test_sync_endpoint_blocks_on_another_actors_future(procs, gates):
    blockers = procs.spawn("future_blockers", Blocker)
    # Each blocker asks the gate on a *different* proc and returns its answer.
    assert blockers.slice(gpus=0).ask_sync.call_one(gates, 3, "x").get(timeout=WAIT_S) == "x"
    answers = [blockers.slice(gpus=r).ask_sync.call_one(gates, (r + 1) % 4, r * 10) for r in range(4)]
    assert [f.get(timeout=WAIT_S) for f in answers] == [0, 10, 20, 30]
    assert blockers.slice(gpus=2).ask_all_sync.call_one(gates, "all").get(timeout=WAIT_S) == ["all"] * 4
    assert blockers.slice(gpus=1).ask_async.call_one(gates, 2, (1, 2)).get(timeout=WAIT_S) == (1, 2)


def test_error_of_the_awaited_actor_reaches_the_original_caller(procs, gates):
    blocker = procs.spawn("future_error_relay", Blocker).slice(gpus=0)
    with pytest.raises(ActorError, match="relayed boom"):
        blocker.relay_boom.call_one(gates, 1, "relayed boom").get(timeout=WAIT_S)
    assert blocker.ask_sync.call_one(gates, 1, "after").get(timeout=WAIT_S) == "after"  # both survive


def _waiting_in_get(ident: int) -> bool:
    """Whether the thread ``ident`` is inside ``Future._wait`` now (so an interrupt lands there)."""
    frame = sys._current_frames().get(ident)
    while frame is not None:
        if frame.f_code.co_name == "_wait" and frame.f_code.co_filename.endswith("_future.py"):
            return True
        frame = frame.f_back
    return False


def _interrupt_when(received: object) -> threading.Thread:
    """A thread that waits for ``received`` (a future: the call started) and for the main
    thread to wait in ``Future.get``, then interrupts it as Ctrl-C or a notebook's interrupt
    button do."""
    import signal

    main = threading.main_thread().ident
    assert main is not None and threading.get_ident() == main, "the interrupt tests run on the main thread"

    def go() -> None:
        received.get(timeout=WAIT_S)  # type: ignore[attr-defined]
        deadline = time.monotonic() + WAIT_S
        poll = threading.Event()
        while not _waiting_in_get(main):  # a condition on another thread's stack: polled
            assert time.monotonic() < deadline, "the main thread never waited in Future.get"
            poll.wait(0.001)
        signal.pthread_kill(main, signal.SIGINT)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_interrupted_get_cancels_a_running_async_endpoint(procs, caplog):
    from gate_actors import Sleeper
    from tetrarch import Channel

    sleeper = procs.spawn("future_sleeper", Sleeper).slice(gpus=3)
    started, started_rx = Channel.open()
    nap = sleeper.nap.call_one(started, WAIT_S * 10)
    t = _interrupt_when(started_rx.recv())
    with pytest.raises(KeyboardInterrupt):
        nap.get(timeout=WAIT_S)
    t.join(WAIT_S)
    # The handler got CancelledError; the actor lives on and the next call is served at once.
    assert sleeper.ping.call_one().get(timeout=WAIT_S) == ("pong", 1)
    with pytest.raises(ActorError, match="was cancelled: its caller was interrupted"):
        nap.get(timeout=WAIT_S)
    assert "waits" not in caplog.text
    started_rx.close()


def test_interrupted_get_of_a_sync_endpoint_says_it_cannot_be_cancelled(procs, caplog):
    import logging

    from gate_actors import Sleeper
    from tetrarch import Channel

    sleeper = procs.spawn("future_blocked", Sleeper).slice(gpus=2)
    started, started_rx = Channel.open()
    block = sleeper.block.call_one(started, WAIT_S)
    release = started_rx.recv()
    t = _interrupt_when(release)
    with caplog.at_level(logging.WARNING, logger="tetrarch"):
        with pytest.raises(KeyboardInterrupt):
            block.get(timeout=WAIT_S)
        t.join(WAIT_S)
        assert "future_blocked.block was interrupted, but it is a sync endpoint" in caplog.text
        # The next calls wait behind it, and that is said once.
        pings = [sleeper.ping.call_one() for _ in range(2)]
        assert caplog.text.count("future_blocked.ping waits: its actor is still running future_blocked.block") == 1
        assert not pings[0].done()
        release.get(timeout=WAIT_S).send("unblocked")
        assert [p.get(timeout=WAIT_S) for p in pings] == [("pong", 0)] * 2
    assert block.get(timeout=WAIT_S) == "unblocked"  # it ran to its end
    started_rx.close()


def test_interrupted_get_of_a_queued_call_answers_it_without_running_it(procs):
    from gate_actors import Sleeper
    from tetrarch import Channel

    sleeper = procs.spawn("future_queued", Sleeper).slice(gpus=1)
    started, started_rx = Channel.open()
    first = sleeper.hold.call_one(started)  # holds the actor until released
    release = started_rx.recv().get(timeout=WAIT_S)
    queued = sleeper.nap.call_one(started, WAIT_S * 10)  # in line behind it
    t = _interrupt_when(first.__class__._completed(None))
    with pytest.raises(KeyboardInterrupt):
        queued.get(timeout=WAIT_S)
    t.join(WAIT_S)
    with pytest.raises(ActorError, match="was cancelled: its caller was interrupted"):
        queued.get(timeout=WAIT_S)  # answered while first still holds the actor
    assert not first.done()
    release.send("released")
    assert first.get(timeout=WAIT_S) == "released"
    assert sleeper.ping.call_one().get(timeout=WAIT_S) == ("pong", 0)  # nap never ran: not even cancelled
    assert not started_rx.recv().done()  # nor said it started
    started_rx.close()
