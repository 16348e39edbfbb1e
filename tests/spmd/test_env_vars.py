"""torchrun's variables from mesh coordinates (pure), and what a proc sees after setup."""

from __future__ import annotations

import pytest

from tetrarch._spmd._env import RankInfo, torchrun_env


def test_the_last_dimension_is_the_local_one() -> None:
    # hosts x gpus = 2 x 3: point rank 4 is host 1, gpu 1.
    info = RankInfo.of(4, ("hosts", "gpus"), (2, 3))
    env = torchrun_env(info, "127.0.0.1", 29500, agent_store=True, restart_count=2, run_id="r")
    assert env == {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "4", "WORLD_SIZE": "6",
        "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "3", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
        "ROLE_RANK": "4", "ROLE_WORLD_SIZE": "6", "ROLE_NAME": "default", "TORCHELASTIC_RUN_ID": "r",
        "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_USE_AGENT_STORE": "True",
    }


def test_a_one_dimensional_mesh_is_one_group() -> None:
    info = RankInfo.of(3, ("gpus",), (4,))
    assert (info.rank, info.local_rank, info.group_rank, info.group_world_size) == (3, 3, 0, 1)


def test_a_mesh_without_dimensions_is_a_world_of_one() -> None:
    assert RankInfo.of(0, (), ()) == RankInfo(rank=0, world_size=1, local_rank=0, local_world_size=1)


def test_a_mesh_without_ranks_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"size zero \['gpus'\]"):
        RankInfo.of(0, ("hosts", "gpus"), (2, 0))


def test_without_torch_the_error_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from tetrarch._spmd import _store

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(ImportError, match="pip install torch"):
        _store.require_torch()


@pytest.mark.isolated
def test_importing_tetrarch_spmd_does_not_import_torch(run_isolated) -> None:
    res = run_isolated("""
        import sys
        import tetrarch, tetrarch.spmd
        from tetrarch.spmd import SPMDActor, setup_torch_elastic_env
        print("torch imported:", "torch" in sys.modules)
    """, timeout=30)
    assert res.returncode == 0, res.stderr
    assert "torch imported: False" in res.stdout
