"""Entry point module (featherweight: the cffi binding is never built or loaded here).

Provider policy: the backend uses ``TETRARCH_EFA_PROVIDER`` when it is set, and says
*available* when the installed libfabric offers that provider with one-sided RMA on RDM
endpoints. Unset, it uses ``efa`` where libfabric has it (an EFA device). Where it has
not, but offers a software provider with RMA, the backend is *available on request*: it
works (over :func:`software_provider`), but automatic selection passes it over, because
core's ``shm``/``tcp`` backends serve that case better and real traffic must not take a
software provider silently; ``RDMABuffer(..., backend="efa")`` or
``TETRARCH_RDMA_BACKEND=efa`` selects it. The reason names the provider it would use.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from tetrarch.plugins import BackendKind, BackendSpec, ProbeResult, hookimpl

INSTALL = "apt-get install libfabric1 libfabric-dev"


#: Software providers with one-sided RMA, in the order the backend prefers them when the
#: provider is not set and there is no ``efa``: ``tcp;ofi_rxm`` reaches other hosts too.
SOFTWARE = ("tcp;ofi_rxm", "shm", "tcp", "sockets")


def software_provider(rma: Sequence[str]) -> str | None:
    """The software provider the backend falls back to among the RMA providers ``rma``."""
    return next((p for p in SOFTWARE if p in rma), None)


@functools.lru_cache(maxsize=1)
def _fallback() -> str | None:
    from ._discover import discover

    return software_provider(discover().rma)


def chosen_provider() -> str:
    """The provider the backend uses: the setting, else ``efa``, else (no ``efa`` here) the
    software fallback (the backend then runs only when selected by name or setting)."""
    from tetrarch._config import EFA_PROVIDER

    provider, source = EFA_PROVIDER.lookup()
    if source != "default" or provider != "efa":
        return provider
    return _fallback() or provider


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
    offered += f"; with device memory (FI_HMEM, used where torch has a GPU): {', '.join(found.hmem) or 'none'}"
    where = f"libfabric {found.version} ({found.library})"
    if provider in found.rma:
        kind = "EFA hardware" if provider == "efa" else "a software provider, not EFA hardware"
        how = "the default" if source == "default" else f"set by {EFA_PROVIDER.env}"
        return ProbeResult.yes(f"{where}, provider {provider!r} ({kind}; {how}); RMA providers here: {offered}")
    soft = software_provider(found.rma)
    if provider == "efa" and source == "default" and soft is not None:
        return ProbeResult.yes(
            f"{where} has no 'efa' provider (it needs an EFA device); on request (RDMABuffer(..., backend='efa') "
            f"or TETRARCH_RDMA_BACKEND=efa) it uses the software provider {soft!r}; RMA providers here: {offered}",
            on_request=True,
        )
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
