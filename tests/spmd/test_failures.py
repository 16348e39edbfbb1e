"""A failing rank never hangs the others: SPMDActor.main on gloo when one rank raises, exits or dies.

Tests after which every proc lives share one mesh; those that end with procs stopped get their
own. The bound: every other rank's outcome reaches
the client within ``BOUND`` seconds of the first failure (docs/spmd.md, "When a rank fails").
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from spmd_helpers import NO_TORCH

from tetrarch import ActorError, ProcMesh, SupervisionError, this_host
from tetrarch.testing import scaled

pytest.importorskip("torch", reason=NO_TORCH)

from spmd_failing import one_rank_fails
from spmd_helpers import allreduce_ranks

from tetrarch.spmd import RankExitError, RunAbortedError, SPMDActor

pytestmark = pytest.mark.timeout(scaled(120))

T = scaled(60)
#: Seconds from the first failure the client sees to the last rank's outcome (abort grace 1 s included).
BOUND = scaled(2.0)
N = 3
BAD = 1


def _mesh() -> Iterator[ProcMesh]:
    pm = this_host().spawn_procs(per_host={"gpus": N})
    yield pm
    pm.stop().get(timeout=scaled(30))


#: Procs that every test in this module leaves alive.
shared = pytest.fixture(scope="module", name="shared")(_mesh)
#: Procs of a test that ends with some of them stopped.
fresh = pytest.fixture(name="fresh")(_mesh)


def _run(procs: ProcMesh, mode: str, out: Path) -> tuple[Any, list[tuple[float, Any]]]:
    """Run ``one_rank_fails(mode)``; each rank's outcome (value or exception) with its arrival time."""
    am = procs.spawn("spmd", SPMDActor)
    addr, port = am.slice(gpus=0).get_host_port.call_one(None).get(timeout=T)
    outcomes: list[tuple[float, Any]] = []
    for fut in am.main.stream(addr, port, functools.partial(one_rank_fails, mode, BAD, str(out))):
        try:
            value: Any = fut.get(timeout=T)
        except Exception as exc:  # noqa: BLE001 - every rank's outcome is the subject here
            value = exc
        outcomes.append((time.monotonic(), value))
    return am, outcomes


def _spread(outcomes: list[tuple[float, Any]]) -> float:
    first_error = min(t for t, v in outcomes if isinstance(v, BaseException))
    return max(t for t, _ in outcomes) - first_error


def _pids(out: Path) -> list[int]:
    return [int((out / f"pid-{r}").read_text()) for r in range(N)]


def _aborted_by(value: Any, rank: int) -> bool:
    return isinstance(value, ActorError) and isinstance(value.exception, RunAbortedError) \
        and value.exception.failed_rank == rank


@pytest.mark.parametrize("mode", ["raise", "exit3"])
def test_a_rank_that_fails_mid_allreduce_aborts_the_others_and_the_procs_stay_usable(
        shared: ProcMesh, tmp_path: Path, mode: str) -> None:
    am, outcomes = _run(shared, mode, tmp_path)
    errors = [v for _, v in outcomes if isinstance(v, ActorError)]
    assert len(errors) == N, outcomes
    root = [e for e in errors if not isinstance(e.exception, RunAbortedError)]
    assert len(root) == 1, errors
    if mode == "raise":
        assert isinstance(root[0].exception, ValueError) and "boom on rank 1" in str(root[0])
    else:
        assert isinstance(root[0].exception, RankExitError) and root[0].exception.status == 3
    for e in errors:
        if e is not root[0]:
            assert _aborted_by(e, BAD), e
            assert "rank 1 failed first" in str(e)
    assert _spread(outcomes) <= BOUND, outcomes
    # gloo noticed the lost peer: nobody had to be stopped, and the next run works on the same procs
    assert all(psutil.pid_exists(p) for p in _pids(tmp_path))
    addr, port = am.slice(gpus=0).get_host_port.call_one(None).get(timeout=T)
    sums = am.main.call(addr, port, allreduce_ranks).get(timeout=T)
    assert [s["sum"] for s in sums.values()] == [3.0] * N


def test_a_killed_rank_fails_the_call_with_supervision_error_and_aborts_the_others(
        fresh: ProcMesh, tmp_path: Path) -> None:
    _, outcomes = _run(fresh, "kill", tmp_path)
    values = [v for _, v in outcomes]
    dead = [v for v in values if isinstance(v, SupervisionError)]
    assert len(dead) == 1 and "rank 1" in str(dead[0]), values
    others = [v for v in values if v is not dead[0]]
    assert all(_aborted_by(v, BAD) and "process is gone" in str(v) for v in others), values
    assert _spread(outcomes) <= BOUND, outcomes
    pids = _pids(tmp_path)
    assert not psutil.pid_exists(pids[BAD])


def test_ranks_blocked_where_nothing_can_wake_them_are_stopped_within_the_bound(
        fresh: ProcMesh, tmp_path: Path) -> None:
    _, outcomes = _run(fresh, "raise_while_waiting", tmp_path)
    values = [v for _, v in outcomes]
    assert sum(isinstance(v, ActorError) and "boom on rank 1" in str(v) for v in values) == 1, values
    stopped = [v for v in values if isinstance(v, SupervisionError)]
    assert len(stopped) == N - 1, values
    for v in stopped:  # the stopped proc's stderr tail says why
        assert "rank 1 failed first" in str(v) and "tetrarch.spmd: stopping rank" in str(v), v
    assert _spread(outcomes) <= BOUND, outcomes


def test_a_rank_that_ends_early_is_named_in_the_others_error(shared: ProcMesh, tmp_path: Path) -> None:
    _, outcomes = _run(shared, "exit0", tmp_path)
    values = [v for _, v in outcomes]
    assert sum(v is True or v == 1.0 for v in values) <= 1  # the rank that ended
    errors = [v for v in values if isinstance(v, ActorError)]
    assert errors and "rank(s) 1 had already ended their program" in "\n".join(map(str, errors)), values
    assert _spread(outcomes) <= BOUND, outcomes
