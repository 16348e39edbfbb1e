"""Entry point module (featherweight)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence

from tetrarch.plugins import BackendKind, BackendSpec, ProbeResult, hookimpl

ALTERNATIVE = "use the 'local' allocator"  # for the placeholder factory's error
INSTALL = "run on a Slurm login node, or install the Slurm client tools (slurm-client) and set SLURM_CONF"


def probe() -> ProbeResult:
    """Whether ``sbatch`` and ``srun`` are on PATH."""
    found = {tool: shutil.which(tool) for tool in ("sbatch", "srun")}
    missing = [tool for tool, path in found.items() if path is None]
    if missing:
        return ProbeResult.no(f"{' and '.join(missing)} not on PATH", INSTALL)
    return ProbeResult.yes(f"sbatch ({found['sbatch']}) and srun")


@hookimpl
def tetrarch_allocators() -> Sequence[BackendSpec]:
    return [
        BackendSpec(
            BackendKind.ALLOCATOR,
            "slurm",
            "tetrarch_alloc_slurm._slurm:SlurmAllocator",
            probe=probe,
            implemented=False,  # the factory is a placeholder: `tetrarch plugins` says so first
            priority=0,
            extra="slurm",
            summary="host agents on the nodes of a Slurm job (sbatch + srun)",
            capabilities=frozenset({"multi-host"}),
        )
    ]
