"""Callables and actors the SPMD tests run on procs (importable there: conftest puts this folder on sys.path)."""

from __future__ import annotations

import os

from tetrarch import Actor, endpoint

#: Why the SPMD tests are skipped without torch (core does not need it).
NO_TORCH = "torch is not installed (tetrarch.spmd runs torch.distributed programs: pip install torch==2.13.0)"

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                 "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT")


def torchrun_vars() -> dict[str, str | None]:
    """This proc's torchrun variables (the callable form of ``main``)."""
    return {name: os.environ.get(name) for name in TORCHRUN_VARS}


def allreduce_ranks() -> dict[str, object]:
    """``init_process_group("env://")`` as an unmodified script would, then sum the ranks."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    out = {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t.item()}
    dist.destroy_process_group()
    return out


class EnvReader(Actor):
    """Reads the variables ``setup_torch_elastic_env`` left in its proc."""

    @endpoint
    def env(self) -> dict[str, str | None]:
        return torchrun_vars()

    @endpoint
    def allreduce(self) -> dict[str, object]:
        return allreduce_ranks()

    @endpoint
    def backend(self) -> str:
        return picked_backend()


def picked_backend() -> str:
    """What ``pick_backend()`` says in this proc (after ``main``/``setup_env`` agreed on one)."""
    from tetrarch.spmd import pick_backend

    return pick_backend()
