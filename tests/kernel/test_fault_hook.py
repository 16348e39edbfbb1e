"""Unhandled failures reach ``tetrarch.unhandled_fault_hook`` on the client (fresh clients)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tetrarch.testing import scaled

# What the client's fault hook does with a failure (run once, not per transport).
pytestmark = [pytest.mark.transport_independent, pytest.mark.isolated, pytest.mark.timeout(scaled(60))]

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"

#: How long the scenario's main thread waits for a message that never comes: the fault
#: must interrupt it long before (nominal seconds, scaled).
WAIT_S = 30.0


def _unhandled_fault(run_scenario: Callable[..., subprocess.CompletedProcess[str]],
                     hook: str) -> subprocess.CompletedProcess[str]:
    return run_scenario(SCENARIOS / "unhandled_fault.py", hook, str(scaled(WAIT_S)), timeout=50,
                        pythonpath=[HERE])


def test_default_hook_prints_the_report_and_exits_1_running_atexit(run_scenario):
    res = _unhandled_fault(run_scenario, "default")
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert "unhandled failure reached the client" in res.stderr
    assert "MeshFailure on mesh 'doomed', rank 1" in res.stderr
    # Monarch's order: the actor (class, then name and rank), the endpoint it ran, what happened.
    err = res.stderr
    assert ("root event: actor <supervision_actors.Fragile doomed{'gpus': 1/2}> (pid " in err
            and "failed in endpoint 'raise_exc': raise_exc raised ValueError: plain exception" in err), err
    assert "FINALLY RAN" in res.stdout and "ATEXIT RAN" in res.stdout
    assert "MAIN" not in res.stdout  # the wait was interrupted, not finished


def test_a_raising_hook_is_called_once_and_ends_the_client_with_1(run_scenario):
    res = _unhandled_fault(run_scenario, "raising")
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert res.stdout.count("HOOK CALLED") == 1
    assert "hook raised on purpose" in res.stderr and "MeshFailure on mesh 'doomed'" in res.stderr
    assert "ATEXIT RAN" in res.stdout


def test_a_replaced_hook_that_returns_keeps_the_client_running(run_scenario):
    res = run_scenario(SCENARIOS / "returning_fault_hook.py", timeout=50, pythonpath=[HERE])
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    assert "SEEN MeshFailure(mesh='doomed', crashed_ranks=[1], actor=<supervision_actors.Fragile doomed" in res.stdout
    assert "endpoint=raise_exc" in res.stdout  # a hook can tell which class and endpoint failed
    assert "STILL RUNNING alive" in res.stdout
