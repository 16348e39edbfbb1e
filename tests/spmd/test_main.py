"""SPMDActor.main on a 4-proc mesh: scripts, ``-m`` modules, callables, exits, bad input, reruns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spmd_helpers import NO_TORCH

from tetrarch import ActorError, ProcMesh
from tetrarch.testing import scaled

pytest.importorskip("torch", reason=NO_TORCH)

from spmd_helpers import allreduce_ranks, picked_backend, torchrun_vars

from tetrarch.spmd import SPMDActor

pytestmark = pytest.mark.timeout(scaled(90))

SCRIPTS = Path(__file__).parent / "scripts"
T = scaled(60)


@pytest.fixture(scope="module")
def spmd(procs: ProcMesh) -> Any:
    return procs.spawn("spmd", SPMDActor)


@pytest.fixture(scope="module")
def store(spmd: Any) -> tuple[str, int]:
    """The rendezvous store of rank 0 (kept open while the actor lives)."""
    return spmd.slice(gpus=0).get_host_port.call_one(None).get(timeout=T)


def _results(out: Path, tag: str, n: int) -> list[dict]:
    return [json.loads((out / f"{tag}-{r}.json").read_text()) for r in range(n)]


def test_every_rank_gets_torchruns_variables_on_loopback(spmd: Any, store: tuple[str, int]) -> None:
    addr, port = store
    assert addr == "127.0.0.1"
    envs = spmd.main.call(addr, port, torchrun_vars).get(timeout=T)
    for rank, env in enumerate(envs.values()):
        assert env["RANK"] == env["ROLE_RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "4"
        assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"], env["ROLE_NAME"]) == ("0", "1", "default")
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    # one run store for all ranks, not the rendezvous port itself
    assert len({env["MASTER_PORT"] for env in envs.values()}) == 1


def test_a_slice_counts_its_own_ranks(spmd: Any, store: tuple[str, int]) -> None:
    envs = spmd.slice(gpus=slice(1, 3)).main.call(*store, torchrun_vars).get(timeout=T)
    assert [(e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"]) for e in envs.values()] == [("0", "2", "0"), ("1", "2", "1")]


def test_a_callable_joins_a_process_group(spmd: Any, store: tuple[str, int]) -> None:
    results = list(spmd.main.call(*store, allreduce_ranks).get(timeout=T).values())
    assert results == [{"rank": r, "world": 4, "sum": 6.0} for r in range(4)]


def test_a_script_runs_as_main_with_its_argv(spmd: Any, store: tuple[str, int], tmp_path: Path) -> None:
    script = str(SCRIPTS / "allreduce_script.py")
    assert all(spmd.main.call(*store, [script, str(tmp_path), "s"]).get(timeout=T).values())
    for r in _results(tmp_path, "s", 4):
        assert (r["argv"], r["sum"], r["world"], r["name"]) == ([script, str(tmp_path), "s"], 10.0, 4, "__main__")


def test_a_module_runs_with_dash_m(spmd: Any, store: tuple[str, int], tmp_path: Path) -> None:
    assert all(spmd.main.call(*store, ["-m", "spmd_module", str(tmp_path), "m"]).get(timeout=T).values())
    for r in _results(tmp_path, "m", 4):
        assert (r["argv"][1:], r["sum"]) == ([str(tmp_path), "m"], 10.0)
        assert r["argv"][0].endswith("spmd_module.py")  # as `python -m` sets it


def test_consecutive_runs_on_the_same_procs_get_fresh_stores(spmd: Any, store: tuple[str, int],
                                                             tmp_path: Path) -> None:
    script = str(SCRIPTS / "allreduce_script.py")
    ports = []
    for tag in ("a", "b"):
        assert all(spmd.main.call(*store, [script, str(tmp_path), tag]).get(timeout=T).values())
        assert [r["sum"] for r in _results(tmp_path, tag, 4)] == [10.0] * 4
        ports.append(spmd.main.call(*store, torchrun_vars).get(timeout=T).item(gpus=0)["MASTER_PORT"])
    assert ports[0] != ports[1]


def test_sys_exit_0_is_a_normal_return(spmd: Any, store: tuple[str, int]) -> None:
    result = spmd.main.call(*store, [str(SCRIPTS / "exit_script.py"), "1", "0"]).get(timeout=T)
    assert list(result.values()) == [True] * 4


def test_sys_exit_3_is_that_rank_failing_with_status_3(spmd: Any, store: tuple[str, int]) -> None:
    with pytest.raises(ActorError) as err:
        spmd.main.call(*store, [str(SCRIPTS / "exit_script.py"), "2", "3"]).get(timeout=T)
    assert "rank 2 exited with status 3" in str(err.value)


@pytest.mark.parametrize(("args", "needle"), [
    ([], "script_args is empty"),
    (["/no/such/train.py"], "script '/no/such/train.py' does not exist"),
    (["-m", "no_such_module_for_spmd"], "no module named 'no_such_module_for_spmd'"),
    (["-m", "no_such_package_for_spmd.sub"], "cannot be imported"),
    (["-m"], "names no module"),
])
def test_bad_input_fails_before_any_rendezvous(spmd: Any, store: tuple[str, int], args: list, needle: str) -> None:
    with pytest.raises(ActorError) as err:
        spmd.main.call(*store, args).get(timeout=T)
    assert needle in str(err.value)


def test_every_rank_of_a_run_picks_the_backend_the_world_agreed_on(spmd: Any, store: tuple[str, int]) -> None:
    # No proc sees a GPU here: all gloo (tests/spmd/test_gpu.py covers a mesh where some do).
    assert list(spmd.main.call(*store, picked_backend).get(timeout=T).values()) == ["gloo"] * 4


def test_nccl_without_a_gpu_names_gloo() -> None:
    import torch

    from tetrarch.spmd import pick_backend

    if torch.cuda.is_available():
        pytest.skip("this process sees a GPU (tests/spmd/test_gpu.py covers pick_backend there)")

    assert pick_backend() == "gloo"
    with pytest.raises(RuntimeError, match="use backend 'gloo'"):
        pick_backend("nccl")
