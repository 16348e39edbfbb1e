"""Liveness: a proc's own stall never makes it an orphan; a stopped proc is found frozen; a busy one lives.

The rules (docs/supervision.md, "Liveness"): a proc concludes its owner is gone only
from evidence about the owner (a dropped connection, or silence for the orphan timeout
measured while the proc runs and has asked); a proc stopped past the frozen timeout is
reported by its host agent, declared dead by its owner and killed; a proc whose Python
threads cannot answer because a C call holds the GIL is busy, not failed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

import tetrarch
from liveness_actors import Staller
from tetrarch import ActorMesh, MeshFailure, ProcMesh, SupervisionError, this_host
from tetrarch._config import FROZEN_TIMEOUT, HEARTBEAT_INTERVAL
from tetrarch._runtime.services._launch import StateMonitor, proc_state
from tetrarch._runtime.values._wire import ProcFrozen
from tetrarch.testing import Collector, scaled

# Stalls judged from OS state and a process's own clock; the pings are calls like any other
# (run once, not per transport).
pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(90))]

#: Settings the stall tests give their procs: an orphan timeout short enough that a
#: stall of 3x it stays quick (scaled, so that a slow machine's late pings do not count
#: against a live owner), pings 10 times as often.
ORPHAN_S = 2.0
HEARTBEAT_S = 0.2
#: The frozen timeout of the detection tests (nominal seconds; a healthy proc is never
#: stopped, so a short one cannot misfire on a slow machine).
FROZEN_S = 2.0
#: A stopped proc's pending call fails within its frozen timeout plus this (nominal s):
#: up to one monitor tick to see it stopped, one to pass the timeout, the report.
DETECT_SLACK_S = 2.0


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
def test_a_proc_holding_the_gil_for_3x_its_orphan_timeout_survives_busy_not_frozen(faults, caplog):
    """Its heartbeat thread and I/O thread cannot run while a C call holds the GIL: it does not
    take that for its owner's silence; its host agent sees it alive (not stopped) past the frozen
    timeout, so it is not failed; its owner logs it busy, once."""
    orphan = scaled(ORPHAN_S)
    hold = 3 * orphan  # also past FROZEN_S and the owner's busy threshold (FROZEN_S + 4 heartbeats)
    with caplog.at_level(logging.INFO, logger="tetrarch.launch"), \
            stallers(orphan_timeout=orphan, heartbeat_interval=HEARTBEAT_S, frozen_timeout=FROZEN_S) as (_pm, mesh):
        pids = mesh.pid.call().get(timeout=scaled(10)).values()
        start = time.monotonic()
        # A broadcast: the actor thread has no reply to send when the C call ends, so the proc's
        # heartbeat thread runs first after the stall (that is when a wrong judgement would fall).
        mesh.slice(gpus=0).hold_gil.broadcast(hold)
        assert mesh.slice(gpus=0).ok.call_one().get(timeout=hold + scaled(10)) == "alive"  # answered after it
        assert time.monotonic() - start >= hold - 0.5
        _no_failure_within(faults, ORPHAN_S)
        _assert_alive(mesh, pids, faults)
    busy = [r for r in caplog.records if r.name == "tetrarch.launch" and "busy" in r.getMessage()]
    assert len(busy) == 1 and busy[0].levelno == logging.WARNING, [r.getMessage() for r in busy]
    assert f"pid {pids[0]}" in busy[0].getMessage() and "not a failure" in busy[0].getMessage().lower()


@pytest.mark.slow  # a 6 s stop
def test_a_proc_stopped_for_3x_its_orphan_timeout_survives(faults):
    orphan = scaled(ORPHAN_S)
    # A frozen timeout far past the stop: this test is about the proc's own judgement.
    with stallers(orphan_timeout=orphan, heartbeat_interval=HEARTBEAT_S, frozen_timeout=scaled(60)) as (_pm, mesh):
        pids = mesh.pid.call().get(timeout=scaled(10)).values()
        os.kill(pids[0], signal.SIGSTOP)
        try:
            time.sleep(3 * orphan)  # the length of the stop, not a synchronization
        finally:
            os.kill(pids[0], signal.SIGCONT)
        _no_failure_within(faults, ORPHAN_S)
        _assert_alive(mesh, pids, faults)


# -- 2. a stopped proc is frozen: detected, failed, killed ----------------------------------
def test_a_stopped_proc_fails_its_pending_call_and_reaches_the_owner_as_frozen(faults):
    with stallers(frozen_timeout=FROZEN_S, heartbeat_interval=HEARTBEAT_S) as (_pm, mesh):
        pids = mesh.pid.call().get(timeout=scaled(10)).values()
        pending = mesh.slice(gpus=0).sleep.call_one(3600)  # would wait an hour: no timeout of its own
        start = time.monotonic()
        os.kill(pids[0], signal.SIGSTOP)
        with pytest.raises(SupervisionError) as info:
            pending.get(timeout=scaled(FROZEN_S + 10))
        elapsed = time.monotonic() - start
        assert FROZEN_S <= elapsed < scaled(FROZEN_S + DETECT_SLACK_S), elapsed
        text = str(info.value)
        assert "staller.sleep" in text and "frozen" in text and "stopped (state T)" in text, text
        (failure,) = faults.wait(1)
        assert failure.rank == 0 and failure.pid == pids[0] and "frozen" in failure.cause
        try:  # killed, so that it cannot come back half-alive
            psutil.Process(pids[0]).wait(scaled(10))
        except psutil.NoSuchProcess:
            pass
        assert not psutil.pid_exists(pids[0])
        assert mesh.slice(gpus=1).ok.call_one().get(timeout=scaled(10)) == "alive"


@pytest.mark.slow  # waits out the default frozen timeout (8 s)
def test_a_stopped_proc_is_detected_within_10_s_by_default(faults):
    # The defaults, set from code so that they reach the procs whatever the host agent's environment says.
    with stallers(frozen_timeout=FROZEN_TIMEOUT.default, heartbeat_interval=HEARTBEAT_INTERVAL.default) as (_pm, mesh):
        pid = mesh.slice(gpus=0).pid.call_one().get(timeout=scaled(10))
        pending = mesh.slice(gpus=0).sleep.call_one(3600)
        start = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        with pytest.raises(SupervisionError, match="frozen"):
            pending.get(timeout=scaled(20))
        assert time.monotonic() - start < scaled(10)
        faults.wait(1)


def test_the_state_monitor_reports_a_stopped_process_once_and_never_a_sleeping_one():
    """The host agent's view: ``/proc/<pid>/stat`` says T for a stopped process, S for a sleeping one."""
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    stopped, sleeping = subprocess.Popen(argv), subprocess.Popen(argv)
    reports: Collector[tuple[str, ProcFrozen]] = Collector("frozen reports")
    monitor = StateMonitor(lambda ident, report: reports.add((ident, report)))
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        os.waitpid(stopped.pid, os.WUNTRACED)  # returns once it is stopped
        assert proc_state(stopped.pid) == "T" and proc_state(sleeping.pid) in ("R", "S", "D")  # alive
        start = time.monotonic()
        monitor.add("stopped", stopped.pid, 0.5, 0.05)
        monitor.add("sleeping", sleeping.pid, 0.5, 0.05)
        ((ident, report),) = reports.wait(1)
        assert ident == "stopped" and report.state == "T" and report.timeout_s == 0.5
        assert 0.5 <= report.stopped_s <= time.monotonic() - start
        with pytest.raises(TimeoutError):  # once per stop; a sleeping process is alive
            reports.wait(2, timeout=1)
    finally:
        monitor.remove("stopped")
        monitor.remove("sleeping")
        for p in (stopped, sleeping):
            p.kill()
            p.wait(scaled(10))
    assert proc_state(stopped.pid) is None  # reaped: gone
