"""Entry point module (featherweight: libfabric is never loaded here)."""

from __future__ import annotations

from collections.abc import Sequence

from tetrarch.plugins import BackendKind, BackendSpec, ProbeResult, hookimpl

INSTALL = "apt-get install libfabric1 libfabric-dev"


def probe() -> ProbeResult:
    """Whether the libfabric shared library can be found (it is not loaded)."""
    import ctypes.util

    try:
        library = ctypes.util.find_library("fabric")
    except Exception as exc:  # noqa: BLE001 - reported
        return ProbeResult.no(f"cannot look for libfabric: ctypes.util.find_library('fabric') raised {exc!r}", INSTALL)
    if library is None:
        return ProbeResult.no(
            "libfabric shared library not found (ctypes.util.find_library('fabric') returned None)", INSTALL
        )
    return ProbeResult.yes(f"libfabric ({library})")


@hookimpl
def tetrarch_rdma_backends() -> Sequence[BackendSpec]:
    return [
        BackendSpec(
            BackendKind.RDMA,
            "efa",
            "tetrarch_rdma_efa._efa:EfaRdmaBackend",
            probe=probe,
            implemented=False,  # the factory is a placeholder: `tetrarch plugins` says so first
            priority=90,
            extra="efa",
            summary="AWS EFA through libfabric",
            capabilities=frozenset({"same-host", "multi-host"}),
        )
    ]
