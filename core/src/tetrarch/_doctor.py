"""``tetrarch doctor rdma``: what RDMA can do on this machine, and why.

Prints every RDMA backend with its probe's finding (each probe reports what it found:
pyverbs and devices for ``verbs``, providers for ``efa``), the RDMA devices sysfs lists,
and the registry's own decision walk for a transfer between two procs of this host
(:meth:`Registry.explain`, the same code that selects a backend; nothing is re-decided
here). It starts no runtime and opens no device.
"""

from __future__ import annotations

import os
import warnings

from ._plugins._registry import Registry
from ._plugins._specs import BackendKind

__all__ = ["rdma_report"]

_SYSFS = "/sys/class/infiniband"


def _sysfs_devices() -> str:
    try:
        names = sorted(os.listdir(_SYSFS))
    except OSError:
        return f"none ({_SYSFS} does not exist: no RDMA driver is loaded in this kernel)"
    if not names:
        return f"none ({_SYSFS} is empty)"
    lines = []
    for name in names:
        driver = os.path.basename(os.path.realpath(os.path.join(_SYSFS, name, "device", "driver")))
        ports = []
        ports_dir = os.path.join(_SYSFS, name, "ports")
        for port in sorted(os.listdir(ports_dir)) if os.path.isdir(ports_dir) else []:
            try:
                with open(os.path.join(ports_dir, port, "state")) as f:
                    ports.append(f"port {port} {f.read().strip()}")
            except OSError:
                ports.append(f"port {port} ?")
        lines.append(f"{name} (driver {driver}; {', '.join(ports) or 'no ports'})")
    return "\n  ".join(lines)


def rdma_report(registry: Registry) -> str:
    """The text of ``tetrarch doctor rdma`` (runs every RDMA probe; never raises for a backend's failure)."""
    out = ["RDMA backends (probe findings):"]
    for row in registry.statuses(BackendKind.RDMA):
        out.append(f"  {row.name:<6} {row.shown}: {row.reason or '-'}")
        if row.remedy:
            out.append(f"         fix: {row.remedy}")
    out += ["", "RDMA devices (sysfs):", f"  {_sysfs_devices()}", "",
            "A transfer between two procs of this host would use:"]
    with warnings.catch_warnings():  # the fallback warning says what the lines above already show
        warnings.simplefilter("ignore")
        explanation = registry.explain(BackendKind.RDMA)
    out += ["  " + line for line in explanation.render().splitlines()]
    out.append("(per transfer, the choice is made among the backends both sides registered the buffer with "
               "that can reach the owner: shm needs the same host, hardware backends a device on both sides)")
    return "\n".join(out)
