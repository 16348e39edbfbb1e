"""Plain async calls back to back run in one task (``actors._chained``): each as if it had a task of its own."""

from __future__ import annotations

import pytest

from order_actors import WAIT_S
from tetrarch import ActorError
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


def test_back_to_back_async_calls_each_run_in_a_context_of_their_own(procs):
    from gate_actors import Tagger

    tagger = procs.spawn("chain_tagger", Tagger).slice(gpus=0)
    futures = [tagger.tag.call_one(f"call{i}") for i in range(200)]  # queued behind each other
    assert [f.get(timeout=WAIT_S) for f in futures] == [("unset", f"call{i}") for i in range(200)]


def test_each_async_call_of_a_burst_gets_its_own_timeout(procs):
    from gate_actors import Tagger

    tagger = procs.spawn("chain_timeouts", Tagger).slice(gpus=2)
    futures = [tagger.time_out.call_one(0.01) for _ in range(5)]
    assert [f.get(timeout=WAIT_S) for f in futures] == ["timed out, 0 pending"] * 5
    assert tagger.tag.call_one("after").get(timeout=WAIT_S) == ("unset", "after")


def test_a_cancelled_async_call_leaves_no_cancellation_to_the_calls_behind_it(procs):
    from gate_actors import Sleeper
    from test_futures import _interrupt_when
    from tetrarch import Channel

    sleeper = procs.spawn("chain_sleeper", Sleeper).slice(gpus=1)
    started, started_rx = Channel.open()
    nap = sleeper.nap.call_one(started, WAIT_S * 10)
    behind = [sleeper.cancelling.call_one() for _ in range(3)]  # plain async calls in line behind it
    t = _interrupt_when(started_rx.recv())
    with pytest.raises(KeyboardInterrupt):
        nap.get(timeout=WAIT_S)
    t.join(WAIT_S)
    with pytest.raises(ActorError, match="was cancelled: its caller was interrupted"):
        nap.get(timeout=WAIT_S)
    assert [f.get(timeout=WAIT_S) for f in behind] == [0, 0, 0]  # they ran, and none was cancelled
    assert sleeper.ping.call_one().get(timeout=WAIT_S) == ("pong", 1)
    started_rx.close()
