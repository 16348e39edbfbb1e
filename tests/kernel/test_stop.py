"""Stopping: drain, __cleanup__, children first, owners only, and procs exit normally."""

from __future__ import annotations

import os
import time

import pytest

from supervision_actors import Cleaner, Finalizer, Fragile
from tetrarch import Channel, SupervisionError, this_host
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

#: A stop with nothing left to wait for (a stuck cleanup past its timeout, procs that
#: are all dead) returns within this many nominal seconds (scaled).
PROMPT_STOP_S = 5.0


def _drain(receiver, n: int) -> list[str]:
    return [receiver.recv().get(timeout=scaled(10)) for _ in range(n)]


def test_stop_handles_queued_messages_then_runs_cleanup(procs):
    port, receiver = Channel.open()
    mesh = procs.slice(gpus=0).spawn("drain", Cleaner, port, "c")
    futures = [mesh.work.call_one(i) for i in range(20)]
    mesh.stop().get(timeout=scaled(30))
    assert [f.get(timeout=scaled(10)) for f in futures] == list(range(20))
    assert _drain(receiver, 21) == [f"c work {i}" for i in range(20)] + ["c cleanup"]
    with pytest.raises(SupervisionError, match="was stopped"):
        mesh.work.call_one(0)
    assert mesh.stop().get(timeout=scaled(10)) is None  # stopping twice is a no-op


def test_async_cleanup_runs(procs):
    port, receiver = Channel.open()
    mesh = procs.slice(gpus=1).spawn("async_clean", Cleaner, port, "a", None, False, True)
    mesh.stop().get(timeout=scaled(30))
    assert _drain(receiver, 1) == ["a async cleanup"]


def test_owned_meshes_stop_first_recursively(procs):
    port, receiver = Channel.open()
    parent = procs.slice(gpus=0).spawn("parent", Cleaner, port, "parent", procs.slice(gpus=slice(2, 4)))
    child = parent.child_mesh.call_one().get(timeout=scaled(10))
    assert child.work.call(0).get(timeout=scaled(10)).values() == [0, 0]
    _drain(receiver, 2)
    parent.stop().get(timeout=scaled(30))
    assert _drain(receiver, 3) == ["parent.child cleanup", "parent.child cleanup", "parent cleanup"]
    with pytest.raises(SupervisionError, match="stopped"):
        child.work.call(1).get(timeout=scaled(10))


def test_cleanup_that_never_returns_is_abandoned_after_the_timeout(monkeypatch):
    cleanup_timeout = 0.5
    monkeypatch.setenv("TETRARCH_CLEANUP_TIMEOUT", str(cleanup_timeout))  # the procs inherit it
    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        port, _receiver = Channel.open()
        mesh = pm.spawn("stuck", Cleaner, port, "s", None, True)
        mesh.initialized.get(timeout=scaled(10))
        start = time.monotonic()
        mesh.stop().get(timeout=scaled(20))  # a cleanup that was never abandoned would hang here
        elapsed = time.monotonic() - start
        assert cleanup_timeout <= elapsed < scaled(PROMPT_STOP_S), elapsed  # waited for it, then gave up
    finally:
        pm.stop().get(timeout=scaled(30))


def test_only_owners_stop(procs):
    mesh = procs.spawn("owned", Fragile)
    with pytest.raises(ValueError, match="only its owner"):
        mesh.slice(gpus=0).stop()
    with pytest.raises(ValueError, match="must be stopped by its owner"):
        procs.slice(gpus=0).stop()
    mesh.stop().get(timeout=scaled(30))


def test_proc_mesh_stop_lets_processes_exit_normally(tmp_path):
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    marks = [tmp_path / f"final{i}" for i in range(2)]
    mesh = pm.spawn("finalizer", Finalizer)
    for i, path in enumerate(marks):
        mesh.slice(gpus=i).arm.call_one(str(path)).get(timeout=scaled(10))
    pm.stop().get(timeout=scaled(30))
    assert all(p.read_text() == "finalized" for p in marks)  # atexit ran in each proc
    with pytest.raises(RuntimeError, match="already been stopped"):
        pm.spawn("late", Fragile)
    with pytest.raises(SupervisionError, match="stopped"):
        mesh.arm.call(str(tmp_path / "x"))
    assert pm.stop().get(timeout=scaled(10)) is None  # twice: same result


def test_stop_succeeds_after_every_proc_died(faults, monkeypatch):
    # A stop that waited for the dead procs would take the whole stop timeout: make that
    # far longer than the bound below, whatever the slowdown factor.
    monkeypatch.setenv("TETRARCH_STOP_TIMEOUT", str(scaled(4 * PROMPT_STOP_S)))
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = pm.spawn("all_die", Fragile)
    for i in range(2):
        with pytest.raises(SupervisionError):
            mesh.slice(gpus=i).exit.call_one(3).get(timeout=scaled(10))
    faults.wait(2)
    start = time.monotonic()
    pm.stop().get(timeout=scaled(30))
    assert time.monotonic() - start < scaled(PROMPT_STOP_S)
    assert os.getpid()  # the client is fine
