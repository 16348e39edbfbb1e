"""Entry point module (featherweight)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from tetrarch.plugins import AllocatorSpec, Capability, ProbeResult, hookimpl

#: The plugin API version this plugin was written for (tetrarch.plugins.PLUGIN_API_VERSION).
tetrarch_plugin_api = "1.2"

LOCAL = "for a local test cluster: scripts/local-slurm start --nodes 2 && eval \"$(scripts/local-slurm env)\""
INSTALL = ("run on a Slurm login node, or install the Slurm client tools (slurm-client) and set SLURM_CONF; "
           + LOCAL + " (it installs Slurm's Debian packages)")
HINT = "point at a cluster with SLURM_CONF=/path/to/slurm.conf (a login node has it set up); " + LOCAL
#: How long the controller may take to answer the probe.
PING_TIMEOUT = 1.0
#: Where the Slurm tools find their configuration without ``SLURM_CONF``: the default file, and the
#: copy a configless login node's ``sackd`` keeps.
DEFAULT_CONFS = ("/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf")


def probe() -> ProbeResult:
    """Whether ``sbatch`` and ``srun`` are on PATH, a configuration is there (``SLURM_CONF`` or a
    default file) and the controller answers ``scontrol ping`` within a second.

    With no configuration the tools would look the controller up in DNS (SRV records): the probe
    says no at once instead, so a program that never uses Slurm (``this_host()`` probes every
    allocator) starts no ``scontrol`` and sends no DNS query."""
    found = {tool: shutil.which(tool) for tool in ("sbatch", "srun", "scontrol")}
    missing = [tool for tool, path in found.items() if path is None]
    if missing:
        return ProbeResult.no(f"{' and '.join(missing)} not on PATH", INSTALL)
    if not os.environ.get("SLURM_CONF") and not any(os.path.exists(path) for path in DEFAULT_CONFS):
        return ProbeResult.no(f"no Slurm configuration here (SLURM_CONF is unset and there is no "
                              f"{' or '.join(DEFAULT_CONFS)})", HINT)
    where = f"SLURM_CONF={os.environ['SLURM_CONF']}" if os.environ.get("SLURM_CONF") else "the default slurm.conf"
    try:
        res = subprocess.run([found["scontrol"] or "scontrol", "ping"], capture_output=True, text=True,
                             timeout=PING_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return ProbeResult.no(f"the Slurm controller ({where}) did not answer within {PING_TIMEOUT:g} s", HINT)
    except OSError as exc:
        return ProbeResult.no(f"cannot run scontrol ping: {exc}", HINT)
    if res.returncode != 0 or " is UP" not in res.stdout:
        detail = (res.stdout + res.stderr).strip().splitlines()
        return ProbeResult.no(f"the Slurm controller ({where}) does not answer: {detail[-1] if detail else 'down'}",
                              HINT)
    return ProbeResult.yes(f"sbatch ({found['sbatch']}), srun; controller up ({where})")


@hookimpl
def tetrarch_allocators() -> Sequence[AllocatorSpec]:
    return [
        AllocatorSpec(
            "slurm",
            "tetrarch_alloc_slurm._slurm:SlurmAllocator",
            probe=probe,
            implemented=True,
            priority=0,
            extra="slurm",
            summary="host agents on the nodes of a Slurm job (sbatch + srun)",
            capabilities=frozenset({Capability.MULTI_HOST}),
        )
    ]
