"""Concurrency: an actor handles one message at a time; a blocked actor blocks only itself."""

from __future__ import annotations

import threading

import pytest

from order_actors import WAIT_S, Mixed, Overlap, Waiter
from tetrarch import Channel
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


def test_async_endpoints_of_one_actor_do_not_overlap(procs):
    overlap = procs.spawn("overlap", Overlap)
    one = overlap.slice(gpus=1)
    # Many calls in flight at once, from the whole mesh and a slice, and from two threads.
    futures = [one.work.call_one(0.002) for _ in range(20)]
    mesh_calls = [overlap.work.call(0.002) for _ in range(5)]

    def more() -> None:
        futures.extend(one.work.call_one(0.001) for _ in range(10))

    t = threading.Thread(target=more)
    t.start()
    t.join(WAIT_S)
    assert not t.is_alive()
    handled = [f.get(timeout=WAIT_S) for f in futures]
    for f in mesh_calls:
        f.get(timeout=WAIT_S)
    assert sorted(handled) == sorted(set(handled)), "two handlers saw the same counter value"
    stats = overlap.stats.call().get(timeout=WAIT_S).values()
    assert stats[1] == (1, 35)  # 20 + 10 call_one + 5 mesh calls, never more than one at once
    assert all(s == (1, 5) for i, s in enumerate(stats) if i != 1)


def test_blocked_sync_endpoint_does_not_stall_another_actor_on_the_same_proc(procs):
    waiters = procs.spawn("blocked_a", Waiter)
    others = procs.spawn("free_b", Waiter)
    a = waiters.slice(gpus=0)
    started, started_rx = Channel.open()

    blocked = a.block.call_one(started)
    wake = started_rx.recv().get(timeout=WAIT_S)  # A is now inside its blocking body
    queued = a.ping.call_one("queued behind block")

    # B, on the same proc (and on the others), answers while A is blocked.
    assert others.slice(gpus=0).ping.call_one("b").get(timeout=WAIT_S) == (0, "b")
    assert others.ping.call("all").get(timeout=WAIT_S).values() == [(r, "all") for r in range(4)]
    # So do A's siblings on the other procs: only the one blocked actor is busy.
    assert waiters.slice(gpus=slice(1, 4)).ping.call("sib").get(timeout=WAIT_S).values() == [
        (1, "sib"), (2, "sib"), (3, "sib")]
    assert not blocked.done()
    assert not queued.done(), "A handled a second message while its first was still running"

    wake.send("go")
    assert blocked.get(timeout=WAIT_S) == "go"
    assert queued.get(timeout=WAIT_S) == (0, "queued behind block")
    started_rx.close()


def test_sync_and_async_endpoints_run_one_at_a_time_in_send_order(procs):
    mixed = procs.spawn("mixed", Mixed)
    one = mixed.slice(gpus=2)
    futures = []
    for i in range(60):
        if i % 3 == 0:
            futures.append(one.sync_step.call_one(i))
        elif i % 3 == 1:
            futures.append(one.async_step.call_one(i, 0.002))
        else:
            one.async_step.broadcast(i, 0)  # fire and forget, still in line
    assert [f.get(timeout=WAIT_S) for f in futures] == [i for i in range(60) if i % 3 != 2]
    log = one.dump.call_one().get(timeout=WAIT_S)
    assert log == [(step, i) for i in range(60) for step in ("start", "end")]
    # The actors on the other procs got nothing.
    assert [len(x) for x in mixed.dump.call().get(timeout=WAIT_S).values()] == [0, 0, 120, 0]


def test_calls_from_two_threads_each_keep_their_order(procs):
    mixed = procs.spawn("mixed_threads", Mixed)
    one = mixed.slice(gpus=3)
    barrier = threading.Barrier(2, timeout=WAIT_S)
    errors: list[BaseException] = []

    def sender(base: int) -> None:
        try:
            barrier.wait()
            futs = [(one.sync_step if i % 2 else one.async_step).call_one(base + i, *(() if i % 2 else (0,)))
                    for i in range(100)]
            assert [f.get(timeout=WAIT_S) for f in futs] == [base + i for i in range(100)]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=sender, args=(base,)) for base in (0, 1000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
        assert not t.is_alive()
    assert not errors, errors
    log = one.dump.call_one().get(timeout=WAIT_S)
    # Whole messages never interleave: every start is immediately followed by its end.
    assert [i for step, i in log[0::2]] == [i for step, i in log[1::2]]
    assert {step for step, _ in log[0::2]} == {"start"} and {step for step, _ in log[1::2]} == {"end"}
    # Each thread's messages were handled in the order that thread sent them.
    starts = [i for step, i in log if step == "start"]
    assert [i for i in starts if i < 1000] == list(range(100))
    assert [i for i in starts if i >= 1000] == list(range(1000, 1100))


def test_concurrent_endpoints_overlap_and_plain_ones_do_not_wait_for_them(procs):
    # Monarch's semantics (test_concurrent_endpoints.py): a concurrent handler does not hold
    # the actor. (tetrarch used to make a plain message wait for every running handler, which
    # deadlocked Monarch's gate pattern: tests/kernel/test_gate.py.)
    from order_actors import Concurrent

    mesh = procs.slice(gpus=0).spawn("concurrent", Concurrent)
    first = mesh.wait_gate.call_one("a")
    second = mesh.wait_gate.call_one("b")
    opened = mesh.open_gate.call_one()  # starts while a and b wait: they would deadlock otherwise
    plain = mesh.plain.call_one()  # starts once open_gate reached its first await (here: its end)
    log = plain.get(timeout=WAIT_S)
    assert log[:3] == ["start a", "start b", "open"]  # started in arrival order, each before the next message
    assert opened.get(timeout=WAIT_S) == "opened"
    assert (first.get(timeout=WAIT_S), second.get(timeout=WAIT_S)) == ("a", "b")
    assert sorted(mesh.plain.call_one().get(timeout=WAIT_S)[3:]) == ["end a", "end b"]


def test_concurrent_endpoint_must_be_async_and_stop_cancels_running_handlers(procs):
    from order_actors import Concurrent
    from tetrarch import Actor, SupervisionError, concurrent_endpoint

    with pytest.raises(TypeError, match="needs an 'async def'"):
        class Bad(Actor):
            @concurrent_endpoint
            def sync(self) -> None: ...

    mesh = procs.slice(gpus=1).spawn("cancelled", Concurrent)
    pending = mesh.forever.call_one()
    assert mesh.open_gate.call_one().get(timeout=WAIT_S) == "opened"  # forever is running
    mesh.stop().get(timeout=WAIT_S)
    with pytest.raises(SupervisionError, match="stopped while forever was running"):
        pending.get(timeout=WAIT_S)
