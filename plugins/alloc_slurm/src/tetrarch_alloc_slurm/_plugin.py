"""Entry point module (featherweight)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence

from tetrarch.plugins import BackendKind, BackendSpec, ProbeResult, hookimpl, not_implemented_yet

ALTERNATIVE = "use the 'local' allocator"
INSTALL = "run on a Slurm login node, or install the Slurm client tools (slurm-client) and set SLURM_CONF"


def probe() -> ProbeResult:
    """Whether ``sbatch`` and ``srun`` are on PATH."""
    found = {tool: shutil.which(tool) for tool in ("sbatch", "srun")}
    missing = [tool for tool, path in found.items() if path is None]
    if missing:
        return ProbeResult.no(f"{' and '.join(missing)} not on PATH", INSTALL)
    return not_implemented_yet(f"sbatch ({found['sbatch']}) and srun", "slurm allocator", ALTERNATIVE)


@hookimpl
def tetrarch_allocators() -> Sequence[BackendSpec]:
    return [
        BackendSpec(
            BackendKind.ALLOCATOR,
            "slurm",
            "tetrarch_alloc_slurm._slurm:SlurmAllocator",
            probe=probe,
            priority=0,
            extra="slurm",
            summary="host agents on the nodes of a Slurm job (sbatch + srun)",
            capabilities=frozenset({"multi-host"}),
        )
    ]
