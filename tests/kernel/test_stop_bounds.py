"""Stops are bounded by TETRARCH_STOP_TIMEOUT, whatever user code does, and procs exit cleanly.

An actor blocked in ``__init__`` or in a sync endpoint cannot be interrupted: its stop
ends its proc, and the caller is told why. A stopped proc runs its atexit handlers
and flushes its output; an atexit handler that blocks, or a non-daemon thread left
running, cannot keep it alive past the bound, and its owner is told what it waited for.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from stop_actors import BlockedInit, Blocker, Exiter
from supervision_actors import Cleaner, Finalizer, Fragile
from tetrarch import Channel, this_host
from tetrarch._runtime.meshes._mesh import _BACKSTOP_GRACE_S as BACKSTOP_GRACE_S
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(90))

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"
#: The TETRARCH_STOP_TIMEOUT these tests run with (s).
STOP_S = 2.0
#: What a bounded stop may take past TETRARCH_STOP_TIMEOUT (nominal seconds, scaled): the
#: kill's grace and the exit report's way back.
SLACK_S = 5.0


@pytest.fixture
def short_stop(monkeypatch):
    """A short TETRARCH_STOP_TIMEOUT for the client and the procs it starts (they inherit it)."""
    monkeypatch.setenv("TETRARCH_STOP_TIMEOUT", str(STOP_S))


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _timed_stop(fut_factory) -> float:
    start = time.monotonic()
    fut_factory().get(timeout=scaled(60))
    return time.monotonic() - start


def test_stopping_a_mesh_whose_init_blocks_ends_its_proc_within_the_bound(short_stop, faults, caplog):
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        port, receiver = Channel.open()
        bystander = pm.spawn("bystander", Fragile)
        bystander.initialized.get(timeout=scaled(10))
        mesh = pm.spawn("stuck_init", BlockedInit, port)
        pid = receiver.recv().get(timeout=scaled(10))  # __init__ runs, and blocks
        with caplog.at_level(logging.WARNING, logger="tetrarch"):
            elapsed = _timed_stop(mesh.stop)
        assert STOP_S <= elapsed < STOP_S + scaled(SLACK_S), elapsed
        assert _gone(pid)
        said = caplog.text  # what the caller sees: which actor, what it ran, and that its proc ended
        assert "stuck_init" in said and "could not be stopped" in said and "its __init__" in said, said
        # The proc's other actors ended with it: their owner is told the same reason.
        (failure,) = faults.wait(1)
        assert failure.mesh_name == "bystander" and "could not be stopped" in failure.cause
    finally:
        pm.stop().get(timeout=scaled(30))


@pytest.mark.parametrize(("method", "what"), [("block", "its endpoint 'block'"),
                                               ("block_async", "its async endpoint 'block_async'")])
def test_stopping_a_mesh_blocked_in_an_endpoint_is_bounded(short_stop, caplog, method, what):
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        port, receiver = Channel.open()
        mesh = pm.spawn("stuck_call", Blocker)
        getattr(mesh, method).broadcast(port)
        pid = receiver.recv().get(timeout=scaled(10))
        with caplog.at_level(logging.WARNING, logger="tetrarch"):
            elapsed = _timed_stop(mesh.stop)
        assert STOP_S <= elapsed < STOP_S + scaled(SLACK_S), elapsed
        assert _gone(pid)
        assert what in caplog.text, caplog.text
    finally:
        pm.stop().get(timeout=scaled(30))


def test_proc_mesh_stop_leaves_a_blocked_actor_behind_and_still_runs_atexit(short_stop, tmp_path):
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    port, receiver = Channel.open()
    mark = tmp_path / "final"
    pid = pm.spawn("finalizer", Finalizer).arm.call_one(str(mark)).get(timeout=scaled(10))
    pm.spawn("stuck_init", BlockedInit, port)
    receiver.recv().get(timeout=scaled(10))
    elapsed = _timed_stop(pm.stop)
    assert elapsed < STOP_S + scaled(SLACK_S), elapsed
    assert mark.read_text() == "finalized"  # the interpreter exited normally around the stuck thread
    assert _gone(pid)


def test_proc_mesh_stop_with_a_cleanup_that_never_returns_is_bounded(monkeypatch, short_stop):
    monkeypatch.setenv("TETRARCH_CLEANUP_TIMEOUT", "0.5")
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    port, _receiver = Channel.open()
    mesh = pm.spawn("stuck_cleanup", Cleaner, port, "s", None, True)
    mesh.initialized.get(timeout=scaled(10))
    pid = pm.spawn("other", Fragile).pid.call_one().get(timeout=scaled(10))
    elapsed = _timed_stop(pm.stop)
    assert elapsed < STOP_S + scaled(SLACK_S), elapsed
    assert _gone(pid)


def test_an_atexit_handler_runs_and_its_output_reaches_the_client(capfd):
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    exiter = pm.spawn("exiter", Exiter)
    exiter.print_at_exit.call_one("goodbye from atexit").get(timeout=scaled(10))
    pm.stop().get(timeout=scaled(30))
    out = capfd.readouterr().out
    assert "[procs gpus=0] goodbye from atexit" in out, out  # printed before the stop completed


@pytest.mark.parametrize("how", ["hang_at_exit", "leave_thread"])
def test_an_exit_that_hangs_is_bounded_and_says_what_it_waited_for(short_stop, capfd, how):
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    pid = getattr(pm.spawn("exiter", Exiter), how).call_one().get(timeout=scaled(10))
    elapsed = _timed_stop(pm.stop)
    assert elapsed < STOP_S + scaled(SLACK_S), elapsed
    assert _gone(pid)
    err = capfd.readouterr().err
    waited = "atexit handlers" if how == "hang_at_exit" else "non-daemon thread(s) to end (left-running)"
    assert "had not finished exiting" in err and waited in err, err


@pytest.mark.isolated
@pytest.mark.parametrize("how", ["shutdown", "exit"])
def test_host_mesh_shutdown_and_client_exit_are_bounded(run_scenario, how):
    start = time.monotonic()
    res = run_scenario(SCENARIOS / "stuck_shutdown.py", how, timeout=90, pythonpath=[HERE],
                       env={"TETRARCH_STOP_TIMEOUT": str(STOP_S)})
    took = time.monotonic() - start
    assert res.returncode == 0, res.stderr[-3000:]
    pids = json.loads(next(ln for ln in res.stdout.splitlines() if ln.startswith("PIDS "))[5:])
    assert all(_gone(pid) for pid in pids), pids
    if how == "shutdown":
        elapsed = float(next(ln for ln in res.stdout.splitlines() if ln.startswith("SHUTDOWN "))[9:])
        assert elapsed < STOP_S + scaled(SLACK_S), res.stdout
    assert took < scaled(60)  # the client's own exit did not wait past the bounds either
    out = res.stdout + res.stderr
    assert "The proc exits without it" in out and "still running its atexit handlers" in out, out[-3000:]


def test_a_proc_that_cannot_end_itself_is_killed_past_the_bound(short_stop, monkeypatch, caplog):
    # A stopped (SIGSTOP) proc runs nothing, not even its own stop's bound; with its host
    # agent's freeze watch off, only the stop's kill ends it.
    monkeypatch.setenv("TETRARCH_FROZEN_TIMEOUT", "inf")
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    pid = pm.spawn("frozen", Fragile).pid.call_one().get(timeout=scaled(10))
    os.kill(pid, signal.SIGSTOP)
    with caplog.at_level(logging.WARNING, logger="tetrarch"):
        elapsed = _timed_stop(pm.stop)
    assert STOP_S <= elapsed < STOP_S + scaled(SLACK_S), elapsed
    assert _gone(pid)
    assert "had not exited" in caplog.text and "it was killed" in caplog.text, caplog.text


def test_an_actor_mesh_stop_kills_a_proc_that_cannot_answer_it(short_stop, monkeypatch, caplog):
    monkeypatch.setenv("TETRARCH_FROZEN_TIMEOUT", "inf")
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        mesh = pm.spawn("frozen", Fragile)
        pid = mesh.pid.call_one().get(timeout=scaled(10))
        os.kill(pid, signal.SIGSTOP)
        with caplog.at_level(logging.WARNING, logger="tetrarch"):
            elapsed = _timed_stop(mesh.stop)
        assert STOP_S + BACKSTOP_GRACE_S <= elapsed < STOP_S + BACKSTOP_GRACE_S + scaled(SLACK_S), elapsed
        assert _gone(pid)
        assert "was not stopped" in caplog.text and "killing them" in caplog.text, caplog.text
    finally:
        pm.stop().get(timeout=scaled(30))
