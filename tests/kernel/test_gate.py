"""Monarch's gate pattern: a plain endpoint releases ``@concurrent_endpoint`` handlers that
wait for it (they do not hold the actor), and the waits that could never end raise."""

from __future__ import annotations

import pytest

from gate_actors import AsyncGate, ExplicitPortGate, SelfCaller
from order_actors import WAIT_S
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


@pytest.fixture(scope="module")
def one(procs):
    return procs.slice(gpus=0)


def test_plain_async_endpoint_releases_waiting_concurrent_handlers(one):
    gate = one.spawn("gate", AsyncGate)
    waiting = [gate.wait.call_one(tag) for tag in ("a", "b")]
    assert gate.release_when_ready.call_one().get(timeout=WAIT_S) == "released"
    assert [f.get(timeout=WAIT_S) for f in waiting] == ["a", "b"]
    log = gate.dump.call_one().get(timeout=WAIT_S)
    assert log[:3] == ["start a", "start b", "release"]  # started in arrival order, before the plain one
    assert sorted(log[3:]) == ["end a", "end b"]


def test_sync_endpoint_releases_them_too(one):
    gate = one.spawn("gate_sync", AsyncGate)
    waiting = gate.wait.call_one()
    assert gate.release_sync.call_one().get(timeout=WAIT_S) == "released"
    assert waiting.get(timeout=WAIT_S) == "done"


def test_plain_endpoints_still_run_one_at_a_time_in_send_order_beside_concurrent_ones(one):
    gate = one.spawn("gate_order", AsyncGate)
    waiting = gate.wait.call_one("w")
    plains = [gate.plain.call_one(str(i), 0.01 if i % 2 else 0) for i in range(6)]
    assert [f.get(timeout=WAIT_S) for f in plains] == [str(i) for i in range(6)]
    assert not waiting.done()  # the plain ones did not wait for it
    gate.release_sync.call_one().get(timeout=WAIT_S)
    assert waiting.get(timeout=WAIT_S) == "w"
    log = [e for e in gate.dump.call_one().get(timeout=WAIT_S) if e.startswith("plain")]
    assert log == [f"plain {i} {step}" for i in range(6) for step in ("start", "end")]


def test_explicit_port_concurrent_endpoint_answers_while_the_actor_goes_on(one):
    gate = one.spawn("explicit_gate", ExplicitPortGate)
    assert gate.wait.call_one().get(timeout=WAIT_S) == "started"
    assert gate.ping.call_one().get(timeout=WAIT_S) == "pong"
    gate.release.call_one().get(timeout=WAIT_S)


def test_waiting_for_a_call_to_itself_raises_instead_of_hanging(one):
    me = one.spawn("self_caller", SelfCaller)
    # A plain handler awaiting its own actor: the call could start only after it returned.
    answer = me.await_self.call_one(me).get(timeout=WAIT_S)
    assert answer.startswith("UsageError: waiting for self_caller.target here would never end"), answer
    assert "@concurrent_endpoint" in answer and "self.target(...)" in answer
    # Blocking the actor's own thread on it: the same.
    answer = me.get_self_sync.call_one(me).get(timeout=WAIT_S)
    assert answer.startswith("UsageError:") and "blocks the thread of self_caller" in answer, answer
    # A concurrent handler does not hold the actor: awaiting its own plain endpoint works.
    assert me.await_self_concurrently.call_one(me).get(timeout=WAIT_S) == "target"


@pytest.mark.transport_independent  # pure: one asyncio loop, no process
def test_calls_waiting_long_behind_a_suspended_plain_handler_are_said_once(monkeypatch, caplog):
    # Plain endpoints run one at a time (Monarch's rule): one that awaits what a later message
    # would provide waits forever. That cannot be told from a long legitimate wait, so the
    # actor says it (once), naming the fix, instead of raising.
    import asyncio
    import logging
    from collections import deque

    from tetrarch._runtime.actors import _stall

    monkeypatch.setattr(_stall, "STALL_S", 0.01)

    async def main() -> None:
        never = asyncio.Event()
        hold = asyncio.create_task(never.wait())
        running: list[tuple[asyncio.Task, str]] = [(hold, "release_when_ready")]
        mailbox: deque = deque(["the call that would set it"])
        watch = _stall.StallWatch(asyncio.get_running_loop(), "gate[0]", lambda: running[0] if running else None,
                                  mailbox)
        said = asyncio.Event()

        class Said(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                said.set()  # the watch logs on the loop's thread

        handler = Said()
        logging.getLogger("tetrarch.actor").addHandler(handler)
        try:
            for _ in range(3):
                watch.queued_behind()  # armed once, however often calls queue
            await said.wait()
            watch.queued_behind()  # said: never again for this actor
            done = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(0.05, done.set_result, None)
            await done
        finally:
            logging.getLogger("tetrarch.actor").removeHandler(handler)
            hold.cancel()

    with caplog.at_level(logging.WARNING, logger="tetrarch.actor"):
        asyncio.run(asyncio.wait_for(main(), scaled(10)))
    assert len(caplog.records) == 1, caplog.text
    text = caplog.records[0].getMessage()
    assert text.startswith("gate[0]: 1 message(s) have waited 0.01 s or more behind its plain endpoint "
                           "release_when_ready"), text
    assert "make release_when_ready a @concurrent_endpoint" in text


@pytest.mark.transport_independent  # pure: one asyncio loop, no process
def test_a_handler_that_ends_in_time_is_not_reported(monkeypatch, caplog):
    import asyncio
    import logging
    from collections import deque

    from tetrarch._runtime.actors import _stall

    monkeypatch.setattr(_stall, "STALL_S", 0.05)

    async def main() -> None:
        first = asyncio.create_task(asyncio.sleep(0))
        running: list[tuple[asyncio.Task, str]] = [(first, "a")]
        mailbox: deque = deque(["next"])
        loop = asyncio.get_running_loop()
        watch = _stall.StallWatch(loop, "w[0]", lambda: running[0] if running else None, mailbox)
        watch.queued_behind()  # looks at STALL_S
        await first
        # Another handler when the watch looks: it watches that one, which ends before it looks again
        # (timers fire in deadline order: 0.08 s, then 0.1 s).
        second = asyncio.create_task(asyncio.sleep(0.08))
        running[0] = (second, "b")
        await second
        running.clear()
        done = loop.create_future()
        loop.call_later(0.15, done.set_result, None)  # after it looked again
        await done

    with caplog.at_level(logging.WARNING, logger="tetrarch.actor"):
        asyncio.run(asyncio.wait_for(main(), scaled(10)))
    assert not caplog.records, caplog.text
