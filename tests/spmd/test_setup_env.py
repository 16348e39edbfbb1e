"""setup_torch_elastic_env on a 2-D (hosts x gpus) mesh and on a slice; its argument checks."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from spmd_helpers import NO_TORCH

from tetrarch import ActorError, ProcMesh, this_host
from tetrarch.testing import scaled

pytest.importorskip("torch", reason=NO_TORCH)

from spmd_helpers import EnvReader

from tetrarch.spmd import setup_torch_elastic_env

pytestmark = pytest.mark.timeout(scaled(90))
T = scaled(60)


@pytest.fixture(scope="module")
def grid() -> Iterator[ProcMesh]:
    pm = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    yield pm
    pm.stop().get(timeout=scaled(30))


def test_a_2d_mesh_has_hosts_as_groups_and_gpus_as_local_ranks(grid: ProcMesh) -> None:
    setup_torch_elastic_env(grid)
    readers: Any = grid.spawn("readers", EnvReader)
    envs = list(readers.env.call().get(timeout=T).values())
    got = [(e["RANK"], e["LOCAL_RANK"], e["GROUP_RANK"], e["LOCAL_WORLD_SIZE"], e["GROUP_WORLD_SIZE"]) for e in envs]
    assert got == [("0", "0", "0", "2", "2"), ("1", "1", "0", "2", "2"),
                   ("2", "0", "1", "2", "2"), ("3", "1", "1", "2", "2")]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"} and {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert {e["TORCHELASTIC_USE_AGENT_STORE"] for e in envs} == {"True"}
    # and init_process_group("env://") works against the store rank 0 keeps open
    sums = [r["sum"] for r in readers.allreduce.call().get(timeout=T).values()]
    assert sums == [6.0] * 4


def test_a_slice_is_set_up_with_its_own_ranks(grid: ProcMesh) -> None:
    column = grid.slice(gpus=slice(1, 2))  # procs 1 and 3 of the grid: {hosts: 2, gpus: 1}
    setup_torch_elastic_env(column)
    readers: Any = column.spawn("column_readers", EnvReader)
    envs = list(readers.env.call().get(timeout=T).values())
    assert [(e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"]) for e in envs] == [("0", "2", "0"), ("1", "2", "0")]
    assert [r["sum"] for r in readers.allreduce.call().get(timeout=T).values()] == [1.0, 1.0]


def test_half_a_master_address_is_refused(grid: ProcMesh) -> None:
    with pytest.raises(ValueError, match="both master_addr and master_port"):
        setup_torch_elastic_env(grid, master_addr="127.0.0.1")


def test_a_master_port_in_use_is_refused_before_any_rank_starts(grid: ProcMesh) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ActorError, match=f"master_port {port} on 127.0.0.1 cannot be bound by rank 0"):
            setup_torch_elastic_env(grid, master_addr="127.0.0.1", master_port=port)


def test_a_mesh_with_a_zero_size_dimension_cannot_be_made() -> None:
    # Zero-size meshes are refused where they would be made, before any rank exists.
    with pytest.raises(ValueError, match="gpus"):
        this_host().spawn_procs(per_host={"gpus": 0})


def test_an_empty_slice_is_refused(grid: ProcMesh) -> None:
    with pytest.raises(IndexError, match="selects nothing"):
        setup_torch_elastic_env(grid.slice(gpus=slice(1, 1)))
