"""Entry point module (featherweight: pyverbs is imported only inside the probe)."""

from __future__ import annotations

from collections.abc import Sequence

from tetrarch.plugins import BackendKind, BackendSpec, ProbeResult, hookimpl, module_present

INSTALL = "install Debian's python3-pyverbs (rdma-core) and put its pyverbs folder on PYTHONPATH"
NO_DEVICE = "check `ibv_devices`; load the RDMA kernel modules (e.g. mlx5_ib, rdma_rxe) or use a host with an RDMA NIC"


def _device_name(device: object) -> str:
    name = getattr(device, "name", device)
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def probe() -> ProbeResult:
    """pyverbs must import and ``pyverbs.device.get_device_list()`` be non-empty."""
    if not module_present("pyverbs"):
        return ProbeResult.no("pyverbs not importable: no module named 'pyverbs'", INSTALL)
    try:
        from pyverbs.device import get_device_list
    except Exception as exc:  # noqa: BLE001 - reported
        return ProbeResult.no(f"pyverbs not importable: {type(exc).__name__}: {exc}", INSTALL)
    try:
        devices = list(get_device_list())
    except Exception as exc:  # noqa: BLE001 - PyverbsRDMAError('Failed to get devices list')
        return ProbeResult.no(f"pyverbs found but no RDMA device (get_device_list failed: {exc})", NO_DEVICE)
    if not devices:
        return ProbeResult.no("pyverbs found but no RDMA device (get_device_list returned [])", NO_DEVICE)
    names = ", ".join(_device_name(d) for d in devices)
    return ProbeResult.yes(f"pyverbs and RDMA device(s) {names}")


@hookimpl
def tetrarch_rdma_backends() -> Sequence[BackendSpec]:
    return [
        BackendSpec(
            BackendKind.RDMA,
            "verbs",
            "tetrarch_rdma_verbs._verbs:VerbsRdmaBackend",
            probe=probe,
            implemented=False,  # the factory is a placeholder: `tetrarch plugins` says so first
            priority=100,
            extra="verbs",
            summary="ibverbs (InfiniBand / RoCE) via pyverbs",
            capabilities=frozenset({"same-host", "multi-host"}),
        )
    ]
