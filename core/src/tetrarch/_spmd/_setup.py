"""setup_torch_elastic_env: torchrun's variables on every proc of a mesh, for actors that init torch.distributed."""

from __future__ import annotations

import itertools
from typing import Any

from .._runtime.meshes._proc_mesh import ProcMesh
from ._actor import SPMDActor
from ._env import check_sizes
from ._store import require_torch

__all__ = ["setup_torch_elastic_env", "setup_torch_elastic_env_async"]

_names = itertools.count()


def _check(proc_mesh: ProcMesh, master_addr: str | None, master_port: int | None) -> None:
    if (master_addr is None) != (master_port is None):
        raise ValueError("pass both master_addr and master_port, or neither (then rank 0 starts the rendezvous"
                         " store on a port the OS picks)")
    require_torch()
    check_sizes(proc_mesh.sizes)


def _spawn(proc_mesh: ProcMesh) -> tuple[Any, Any]:
    actors: Any = proc_mesh.spawn(f"_SPMDActor{next(_names)}", SPMDActor)
    first = actors.slice(**dict.fromkeys(proc_mesh.sizes, 0))
    return actors, first


def setup_torch_elastic_env(proc_mesh: ProcMesh, master_addr: str | None = None, master_port: int | None = None,
                            use_ipaddr: Any = None) -> None:
    """Set torchrun's variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...) on every proc of ``proc_mesh``.

    Afterwards actors on those procs can call ``init_process_group(init_method="env://")``.
    Without ``master_addr``/``master_port``, the first proc starts a rendezvous store on a
    port the OS picks and keeps it open while the procs live; every rank connects to it
    (``TORCHELASTIC_USE_AGENT_STORE=True``), so no port is freed and rebound later.
    Ranks are those of ``proc_mesh`` (a slice counts from 0). ``pick_backend()`` then gives
    every proc the same backend: ``nccl`` when every proc sees a GPU, else ``gloo``. Blocks until done.

    Raises:
        ValueError: only one of ``master_addr``/``master_port`` given, or a dimension of size zero.
        ImportError: torch is not installed (names ``pip install torch``).
        ActorError: a proc could not set up (e.g. torch missing there), or ``master_port`` is
            already in use on ``master_addr`` where the first proc runs (its ``OSError`` names the fix).
    """
    _check(proc_mesh, master_addr, master_port)
    actors, first = _spawn(proc_mesh)
    if master_addr is None:
        master_addr, master_port = first.get_host_port.call_one(use_ipaddr).get()
    else:
        first.check_master_port.call_one(master_addr, master_port).get()
    backend = "nccl" if all(actors.sees_gpu.call().get().values()) else "gloo"
    actors.setup_env.call(master_addr, master_port, backend).get()


async def setup_torch_elastic_env_async(proc_mesh: ProcMesh, master_addr: str | None = None,
                                        master_port: int | None = None, use_ipaddr: Any = None) -> None:
    """:func:`setup_torch_elastic_env` for asyncio code (same arguments and errors)."""
    _check(proc_mesh, master_addr, master_port)
    actors, first = _spawn(proc_mesh)
    if master_addr is None:
        master_addr, master_port = await first.get_host_port.call_one(use_ipaddr)
    else:
        await first.check_master_port.call_one(master_addr, master_port)
    backend = "nccl" if all((await actors.sees_gpu.call()).values()) else "gloo"
    await actors.setup_env.call(master_addr, master_port, backend)
