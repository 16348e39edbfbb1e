"""Entry point module (featherweight: the cffi binding is never built or loaded here).

Provider policy: the backend uses ``TETRARCH_EFA_PROVIDER`` (default ``efa``). The probe
says *available* only when the installed libfabric offers that provider with one-sided
RMA on RDM endpoints, and names it. Where the ``efa`` provider is absent (no EFA device)
the backend is *unavailable* even if software providers (``shm``, ``tcp;ofi_rxm``) are
present: priority would otherwise make real traffic take a software provider silently,
when core's ``shm``/``tcp`` backends serve that case better. The reason lists the
providers found and the remedy says how to select one on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence

from tetrarch.plugins import BackendKind, BackendSpec, ProbeResult, hookimpl

INSTALL = "apt-get install libfabric1 libfabric-dev"


def probe() -> ProbeResult:
    """Whether libfabric is here and offers the configured provider with RMA (listed through ctypes)."""
    from tetrarch._config import EFA_PROVIDER

    from ._discover import discover

    try:
        provider, source = EFA_PROVIDER.lookup()
    except ValueError as exc:
        return ProbeResult.no(str(exc), "fix TETRARCH_EFA_PROVIDER")
    found = discover()
    if found.error:
        return ProbeResult.no(found.error, INSTALL)
    offered = ", ".join(found.rma) or "none"
    where = f"libfabric {found.version} ({found.library})"
    if provider in found.rma:
        kind = "EFA hardware" if provider == "efa" else "a software provider, not EFA hardware"
        how = "the default" if source == "default" else f"set by {EFA_PROVIDER.env}"
        return ProbeResult.yes(f"{where}, provider {provider!r} ({kind}; {how}); RMA providers here: {offered}")
    if provider == "efa":
        return ProbeResult.no(
            f"{where} has no 'efa' provider: it needs an EFA device (an AWS instance with EFA enabled); "
            f"RMA providers here: {offered}",
            f"on EFA hardware install the EFA driver and libfabric with efa; to run this backend over a software "
            f"provider on purpose (tests), set {EFA_PROVIDER.env}=shm or 'tcp;ofi_rxm'",
        )
    why = "offers it without one-sided RMA on RDM endpoints" if provider in found.other else "has no such provider"
    return ProbeResult.no(f"{where} {why}: {provider!r} ({EFA_PROVIDER.env}); RMA providers here: {offered}",
                          f"set {EFA_PROVIDER.env} to one of: {offered}")


@hookimpl
def tetrarch_rdma_backends() -> Sequence[BackendSpec]:
    return [
        BackendSpec(
            BackendKind.RDMA,
            "efa",
            "tetrarch_rdma_efa._efa:EfaRdmaBackend",
            probe=probe,
            priority=90,
            extra="efa",
            summary="AWS EFA through libfabric (TETRARCH_EFA_PROVIDER selects another provider)",
            capabilities=frozenset({"same-host", "multi-host"}),
        )
    ]
