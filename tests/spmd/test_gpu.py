"""tetrarch.spmd on GPUs: nccl when every rank sees a GPU, one backend for the whole world.

Needs torch with a CUDA (or ROCm) device; skips with the probe's reason elsewhere (this VM's
torch is CPU-only). Run on a GPU machine: ``pytest tests/spmd/test_gpu.py -q`` (scripts/gpu-check).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from spmd_helpers import NO_TORCH

from tetrarch import ProcMesh, this_host
from tetrarch.testing import scaled

pytest.importorskip("torch", reason=NO_TORCH)

import torch
from spmd_gpu import ddp_on_picked_backend, make_data, make_model, train

from tetrarch.spmd import SPMDActor

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


def test_a_mesh_with_more_procs_than_gpus_agrees_on_gloo(more_than_gpus: ProcMesh) -> None:
    # Proc GPUS sees no GPU (CUDA_VISIBLE_DEVICES names one this host lacks): every rank must
    # use gloo, or nccl and gloo ranks would never meet in init_process_group.
    results = _run(more_than_gpus)
    assert {r["backend"] for r in results} == {"gloo"}
    n = GPUS + 1
    assert {r["sum"] for r in results} == {n * (n + 1) / 2}
    ref = _reference()
    for r in results:
        for k, v in ref.items():
            assert torch.allclose(r["weights"][k], v, atol=1e-5), k
