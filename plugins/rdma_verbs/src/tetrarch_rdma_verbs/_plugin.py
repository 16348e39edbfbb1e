"""Entry point module (featherweight: pyverbs is imported only inside the probe, and only where found)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tetrarch.plugins import Capability, ProbeResult, RdmaBackendSpec, Setting, hookimpl

from ._devlist import list_devices
from ._import import INSTALL, locate

#: The plugin API version this plugin was written for (tetrarch.plugins.PLUGIN_API_VERSION).
tetrarch_plugin_api = "1.2"

#: The settings the backend reads (each call reads the current value), declared to tetrarch by
#: :func:`tetrarch_settings`.
RDMA_DEVICE: Setting[str | None] = Setting(
    "rdma_device", "TETRARCH_RDMA_DEVICE", str, None,
    "RDMA device (and port) the verbs backend uses, e.g. `mlx5_0` or `mlx5_0:1`; unset: the NIC nearest the "
    "process's GPU (PCIe topology), else the first device with an active port", probed=True,
)
RDMA_CHUNK_SIZE: Setting[int] = Setting(
    "rdma_chunk_size", "TETRARCH_RDMA_CHUNK_SIZE", int, 64 << 20,
    "largest single work request of the verbs RDMA backend; larger transfers are split", unit="bytes",
)
VERBS_MAX_WR: Setting[int] = Setting(
    "verbs_max_wr", "TETRARCH_VERBS_MAX_WR", int, 16,
    "work requests the verbs backend keeps in flight per queue pair",
)

NO_DEVICE = ("use a host with an RDMA NIC (check `ibv_devices`), or load the kernel modules (mlx5_ib; rdma_rxe for "
             "Soft-RoCE); until then RDMA uses the shm/tcp backends")


def probe() -> ProbeResult:
    """pyverbs must import (a regular install or Debian's python3-pyverbs) and
    ``pyverbs.device.get_device_list()`` list at least one device (asked in a child process,
    so listing plugins loads no native code)."""
    where = locate()
    if where is None:
        return ProbeResult.no("pyverbs not found (no module named 'pyverbs', no Debian python3-pyverbs)", INSTALL)
    origin = "pyverbs" if where == "python path" else f"Debian's pyverbs ({where})"
    found = list_devices()
    if "import_error" in found or "child_error" in found:
        return ProbeResult.no(f"{origin} does not import: {found.get('import_error') or found['child_error']}",
                              INSTALL)
    origin += f" {found['version']}" if found.get("version") else ""
    if "list_error" in found:
        why = "" if os.path.isdir("/sys/class/infiniband_verbs") else (
            "; /sys/class/infiniband_verbs is absent: the kernel has no RDMA support loaded")
        return ProbeResult.no(f"{origin} found but no RDMA device: get_device_list() failed "
                              f"({found['list_error']}{why})", NO_DEVICE)
    if not found.get("devices"):
        return ProbeResult.no(f"{origin} found but no RDMA device: get_device_list() returned []", NO_DEVICE)
    return ProbeResult.yes(f"{origin}, RDMA device(s) {', '.join(found['devices'])}")


@hookimpl
def tetrarch_settings() -> Sequence[Setting[Any]]:
    return [RDMA_DEVICE, RDMA_CHUNK_SIZE, VERBS_MAX_WR]


@hookimpl
def tetrarch_rdma_backends() -> Sequence[RdmaBackendSpec]:
    return [
        RdmaBackendSpec(
            "verbs",
            "tetrarch_rdma_verbs._verbs:VerbsRdmaBackend",
            probe=probe,
            priority=100,
            extra="verbs",
            summary="ibverbs (InfiniBand / RoCE) via pyverbs: RC queue pairs, one-sided READ/WRITE, dma-buf GPU memory",
            capabilities=frozenset({Capability.SAME_HOST, Capability.MULTI_HOST}),
        )
    ]
