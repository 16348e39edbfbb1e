"""Liveness: a proc's own stall never makes it an orphan.

A proc concludes its owner is gone only from evidence about the owner (a dropped
connection, or silence for the orphan timeout measured while the proc runs and has asked).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import tetrarch
from liveness_actors import Staller
from tetrarch import ActorMesh, MeshFailure, ProcMesh, this_host
from tetrarch.testing import Collector, scaled

pytestmark = pytest.mark.timeout(scaled(90))

#: Settings the stall tests give their procs: an orphan timeout short enough that a
#: stall of 3x it stays quick (scaled, so that a slow machine's late pings do not count
#: against a live owner), pings 10 times as often.
ORPHAN_S = 2.0
HEARTBEAT_S = 0.2


@pytest.fixture(scope="module", autouse=True)
def _host_agent_started_first(procs: ProcMesh) -> None:
    """Start ``this_host()``'s agent (with the module's ``procs``) before a test configures short
    timeouts: an agent started inside ``tetrarch.configured(...)`` would keep them for good."""


@contextmanager
def stallers(**settings: object) -> Iterator[tuple[ProcMesh, ActorMesh]]:
    """Two procs started with ``settings`` (``tetrarch.configured``), a ``Staller`` on each."""
    with tetrarch.configured(**settings):
        pm = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        mesh = pm.spawn("staller", Staller)
        assert mesh.ok.call().get(timeout=scaled(30)).values() == ["alive", "alive"]
        yield pm, mesh
    finally:
        pm.stop().get(timeout=scaled(30))


def _no_failure_within(faults: Collector[MeshFailure], seconds: float) -> None:
    """Give a (wrongly) orphaned proc time to exit and be reported: no failure may arrive.

    A proc that takes its own stall for its owner's silence exits at its first heartbeat
    after it resumes; ``seconds`` (an orphan timeout) also covers one that misjudges later.
    """
    with pytest.raises(TimeoutError):
        faults.wait(1, timeout=seconds)


def _assert_alive(mesh: ActorMesh, pids: list[int], faults: Collector[MeshFailure]) -> None:
    assert mesh.ok.call().get(timeout=scaled(10)).values() == ["alive", "alive"]
    assert mesh.pid.call().get(timeout=scaled(10)).values() == pids
    assert faults.items == []


# -- 1. a proc's own stall is no evidence that its owner is gone ---------------------------
@pytest.mark.slow  # a 6 s stall
def test_a_proc_holding_the_gil_for_3x_its_orphan_timeout_survives(faults):
    """Its heartbeat thread and I/O thread cannot run while a C call holds the GIL: it does not
    take that for its owner's silence."""
    orphan = scaled(ORPHAN_S)
    hold = 3 * orphan
    with stallers(orphan_timeout=orphan, heartbeat_interval=HEARTBEAT_S) as (_pm, mesh):
        pids = mesh.pid.call().get(timeout=scaled(10)).values()
        start = time.monotonic()
        # A broadcast: the actor thread has no reply to send when the C call ends, so the proc's
        # heartbeat thread runs first after the stall (that is when a wrong judgement would fall).
        mesh.slice(gpus=0).hold_gil.broadcast(hold)
        assert mesh.slice(gpus=0).ok.call_one().get(timeout=hold + scaled(10)) == "alive"  # answered after it
        assert time.monotonic() - start >= hold - 0.5
        _no_failure_within(faults, ORPHAN_S)
        _assert_alive(mesh, pids, faults)


@pytest.mark.slow  # a 6 s stop
def test_a_proc_stopped_for_3x_its_orphan_timeout_survives(faults):
    orphan = scaled(ORPHAN_S)
    with stallers(orphan_timeout=orphan, heartbeat_interval=HEARTBEAT_S) as (_pm, mesh):
        pids = mesh.pid.call().get(timeout=scaled(10)).values()
        os.kill(pids[0], signal.SIGSTOP)
        try:
            time.sleep(3 * orphan)  # the length of the stop, not a synchronization
        finally:
            os.kill(pids[0], signal.SIGCONT)
        _no_failure_within(faults, ORPHAN_S)
        _assert_alive(mesh, pids, faults)
