"""A proc's first actor reads for the transport while idle (the standby); that never holds
up the proc's other actors.

The standby saves a thread wake-up per call (docs/performance.md). What a user relies on
is unchanged: while that actor runs a long handler, sync or async, calls to another actor
of the same proc are still read and answered; once it is stopped, the proc goes on
serving its other actors. Each test would hang until its bound if the reading were not
handed back (the blocked actor waits for a call that nobody read).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from order_actors import WAIT_S
from standby_actors import Sleeper, Waker
from tetrarch import ProcMesh, this_host
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(90))


@pytest.fixture(params=["standby", "no-standby"])
def one_proc(request, monkeypatch) -> Iterator[ProcMesh]:
    """One proc, with the standby (the default) and without it (``TETRARCH_STANDBY=0``)."""
    if request.param == "no-standby":
        monkeypatch.setenv("TETRARCH_STANDBY", "0")
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    yield pm
    pm.stop().get(timeout=scaled(30))


def _pair(pm: ProcMesh):
    sleeper = pm.spawn("sleeper", Sleeper)  # first: it becomes the proc's standby
    waker = pm.spawn("waker", Waker)
    assert sleeper.pid.call_one().get(timeout=WAIT_S) == waker.pid.call_one().get(timeout=WAIT_S)
    return sleeper, waker


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_busy_actor_does_not_hold_up_another_actor_of_its_proc(one_proc, kind):
    sleeper, waker = _pair(one_proc)
    method = sleeper.wait_for if kind == "sync" else sleeper.wait_async
    blocked = method.call_one(kind, WAIT_S)
    assert waker.wake.call_one(kind).get(timeout=WAIT_S) is True
    assert blocked.get(timeout=WAIT_S) is True  # let go by the waker, not by its timeout


def test_a_busy_actor_releases_reading_again_and_again(one_proc):
    """The hand-over goes both ways: idle again, the actor reads, then hands back on its next wait."""
    sleeper, waker = _pair(one_proc)
    for i in range(5):
        blocked = sleeper.wait_for.call_one(f"round-{i}", WAIT_S)
        assert waker.wake.call_one(f"round-{i}").get(timeout=WAIT_S) is True
        assert blocked.get(timeout=WAIT_S) is True
        assert [sleeper.pid.call_one().get(timeout=WAIT_S) for _ in range(20)]


def test_the_proc_serves_its_other_actors_after_the_reading_one_stopped(one_proc):
    sleeper, waker = _pair(one_proc)
    sleeper.stop().get(timeout=WAIT_S)
    assert waker.wake.call_one("after-stop").get(timeout=WAIT_S) is True
    again = one_proc.spawn("sleeper2", Sleeper)
    blocked = again.wait_for.call_one("again", WAIT_S)
    assert waker.wake.call_one("again").get(timeout=WAIT_S) is True
    assert blocked.get(timeout=WAIT_S) is True
