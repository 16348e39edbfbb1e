"""tetrarch.spmd on GPUs: nccl when every rank sees a GPU, one backend for the whole world.

Needs torch with a CUDA (or ROCm) device; skips with the probe's reason elsewhere (this VM's
torch is CPU-only). Run on a GPU machine: ``pytest tests/spmd/test_gpu.py -q`` (scripts/gpu-check).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from spmd_helpers import NO_TORCH

from tetrarch import ActorError, ProcMesh, this_host
from tetrarch.testing import scaled

pytest.importorskip("torch", reason=NO_TORCH)

import torch
from spmd_gpu import ddp_on_picked_backend, make_data, make_model, train
from spmd_helpers import EnvReader

from tetrarch.spmd import SPMDActor, setup_torch_elastic_env

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [
    pytest.mark.timeout(scaled(180)),
    pytest.mark.skipif(GPUS == 0, reason=f"torch reports no CUDA/ROCm device here (torch {torch.__version__}, "
                       f"cuda build: {torch.version.cuda}, hip: {torch.version.hip})"),
]
T = scaled(120)


def _mesh(n: int) -> Iterator[ProcMesh]:
    pm = this_host().spawn_procs(per_host={"gpus": n})
    yield pm
    pm.stop().get(timeout=scaled(30))


@pytest.fixture
def one() -> Iterator[ProcMesh]:
    yield from _mesh(1)


@pytest.fixture
def more_than_gpus() -> Iterator[ProcMesh]:
    yield from _mesh(GPUS + 1)


def _run(procs: ProcMesh) -> list[dict[str, Any]]:
    am = procs.spawn("spmd", SPMDActor)
    addr, port = am.slice(gpus=0).get_host_port.call_one(None).get(timeout=T)
    return list(am.main.call(addr, port, ddp_on_picked_backend).get(timeout=T).values())


def _reference() -> dict[str, Any]:
    model = make_model()
    train(model, *make_data())
    return model.state_dict()


def test_a_rank_that_sees_a_gpu_trains_ddp_on_nccl(one: ProcMesh) -> None:
    [result] = _run(one)
    assert (result["backend"], result["device"]) == ("nccl", "cuda")
    ref = _reference()
    for k, v in ref.items():  # cuda and cpu float32 math differ in the last bits
        assert torch.allclose(result["weights"][k], v, atol=1e-5), k


def test_main_refuses_a_world_where_only_some_ranks_see_a_gpu(more_than_gpus: ProcMesh) -> None:
    # Proc GPUS sees no GPU (CUDA_VISIBLE_DEVICES names one this host lacks): a torchrun script
    # picking nccl by torch.cuda.is_available() would hang; main says so before it runs.
    am = more_than_gpus.spawn("spmd", SPMDActor)
    addr, port = am.slice(gpus=0).get_host_port.call_one(None).get(timeout=T)
    with pytest.raises(ActorError, match="see a GPU and the others do not"):
        am.main.call(addr, port, ddp_on_picked_backend).get(timeout=T)


def test_setup_torch_elastic_env_agrees_on_gloo_when_some_procs_lack_a_gpu(more_than_gpus: ProcMesh) -> None:
    setup_torch_elastic_env(more_than_gpus)
    readers = more_than_gpus.spawn("readers", EnvReader)
    assert set(readers.backend.call().get(timeout=T).values()) == {"gloo"}
