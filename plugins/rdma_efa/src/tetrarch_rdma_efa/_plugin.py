"""Entry point module (featherweight: the cffi binding is never built or loaded here).

Provider policy: the backend uses ``TETRARCH_EFA_PROVIDER`` when it is set, and says
*available* when the installed libfabric offers that provider with one-sided RMA on RDM
endpoints. Unset, it uses ``efa`` where libfabric has it (an EFA device). Where it has
not, but offers a software provider with RMA, the backend is *available on request*: it
works (over :func:`software_provider`), but automatic selection passes it over, because
core's ``shm``/``tcp`` backends serve that case better and real traffic must not take a
software provider silently; ``RDMABuffer(..., backend="efa")`` or
``TETRARCH_RDMA_BACKEND=efa`` selects it. The reason names the provider it would use.

Owner-side checks (issue 28): with one-sided RMA the owner's CPU never sees a read, so what
protects registered memory must hold in the owner's provider before the read. Providers in
:data:`OWNER_CHECKED` check every access against a key's registration, with keys no peer can
guess; over any other (``shm``), the backend registers nothing unless the user gives that up
with ``efa_allow_unchecked_access`` (``TETRARCH_EFA_ALLOW_UNCHECKED_ACCESS=1``). The probe
says which holds for the provider it would use.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from tetrarch.plugins import Capability, ProbeResult, RdmaBackendSpec, Setting, hookimpl

#: The plugin API version this plugin was written for (tetrarch.plugins.PLUGIN_API_VERSION).
tetrarch_plugin_api = "1.2"

INSTALL = "apt-get install libfabric1 libfabric-dev"
#: The settings the backend reads (read at each call: ``configure`` and the environment count),
#: declared to tetrarch by :func:`tetrarch_settings`.
EFA_PROVIDER: Setting[str] = Setting(
    "efa_provider", "TETRARCH_EFA_PROVIDER", str, "efa",
    "libfabric provider of the `efa` RDMA backend; any RMA-capable one (`shm`, `tcp;ofi_rxm`) runs it without EFA "
    "hardware, for tests (see docs/rdma.md)", probed=True,
)
EFA_ALLOW_UNCHECKED_ACCESS: Setting[bool] = Setting(
    "efa_allow_unchecked_access", "TETRARCH_EFA_ALLOW_UNCHECKED_ACCESS", bool, False,
    "let the `efa` backend register memory over a libfabric provider that does not check peers' accesses on the "
    "owner's side (`shm`: any process of this user on this host may then read and write this process's memory "
    "through it, outside the registered regions too); see docs/rdma.md", probed=True,
)


@hookimpl
def tetrarch_settings() -> Sequence[Setting[Any]]:
    return [EFA_PROVIDER, EFA_ALLOW_UNCHECKED_ACCESS]


#: Software providers with one-sided RMA, in the order the backend prefers them when the
#: provider is not set and there is no ``efa``: ``tcp;ofi_rxm`` reaches other hosts too.
SOFTWARE = ("tcp;ofi_rxm", "shm", "tcp", "sockets")


#: Providers that check every peer access on the owner's side against a registration (key and
#: bounds), and how: a reader that skips tetrarch's request to the owner gets nothing.
OWNER_CHECKED: Mapping[str, str] = {
    "tcp;ofi_rxm": "the owner's provider checks every access against the key's registered range, and keys are "
                   "random 64-bit values handed only to peers of the allocation (tested here)",
    "efa": "the EFA device checks every access against the key's registered range (keys are the device's, "
           "FI_MR_PROV_KEY; not tested on this machine: no EFA device)",
    "verbs;ofi_rxm": "the NIC checks every access against the key's registered range (keys are the device's; "
                     "not tested on this machine: no RDMA device)",
}
#: Why a provider's accesses are not checked on the owner's side, where it is known.
UNCHECKED_WHY: Mapping[str, str] = {
    "shm": "libfabric 1.17's shm reader copies from any address of the owner with process_vm_readv, outside "
           "the registered region too, and accepts a key after its registration closed",
}


def unchecked_refusal(provider: str) -> str | None:
    """Why the backend refuses to register memory over ``provider``, or None where the owner's
    provider checks accesses or the user gave that check up (``efa_allow_unchecked_access``)."""
    if provider in OWNER_CHECKED or EFA_ALLOW_UNCHECKED_ACCESS():
        return None
    why = UNCHECKED_WHY.get(provider, "it is not known to check each access against a registration (keys and "
                                      "bounds) on the owner's side")
    return (f"the efa backend registers no memory over libfabric provider {provider!r}: peers' accesses through it "
            f"are not checked on the owner's side ({why}), so any process of this user that can reach it could "
            f"read and write this process's memory; use a provider that checks ({', '.join(OWNER_CHECKED)}) or "
            f"core's 'shm'/'tcp' backends, or give that check up with TETRARCH_EFA_ALLOW_UNCHECKED_ACCESS=1 "
            f"(configure(efa_allow_unchecked_access=True))")


def protection(provider: str) -> str:
    """What protects buffers registered over ``provider`` (for the probe's reason)."""
    if provider in OWNER_CHECKED:
        return f"owned buffers: {OWNER_CHECKED[provider]}"
    why = UNCHECKED_WHY.get(provider, "not known to check accesses on the owner's side")
    if EFA_ALLOW_UNCHECKED_ACCESS():
        return (f"owned buffers: registered although accesses are not checked on the owner's side ({why}), "
                f"because efa_allow_unchecked_access is set")
    return (f"owned buffers are refused: accesses are not checked on the owner's side ({why}); "
            f"TETRARCH_EFA_ALLOW_UNCHECKED_ACCESS=1 (efa_allow_unchecked_access) gives that check up")


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
    provider, source = EFA_PROVIDER.lookup()
    if source != "default" or provider != "efa":
        return provider
    return _fallback() or provider


def probe() -> ProbeResult:
    """Whether libfabric is here and offers the configured provider with RMA (listed through ctypes)."""
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
        return ProbeResult.yes(f"{where}, provider {provider!r} ({kind}; {how}); {protection(provider)}; "
                               f"RMA providers here: {offered}")
    soft = software_provider(found.rma)
    if provider == "efa" and source == "default" and soft is not None:
        return ProbeResult.yes(
            f"{where} has no 'efa' provider (it needs an EFA device); on request (RDMABuffer(..., backend='efa') "
            f"or TETRARCH_RDMA_BACKEND=efa) it uses the software provider {soft!r}; {protection(soft)}; "
            f"RMA providers here: {offered}",
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
def tetrarch_rdma_backends() -> Sequence[RdmaBackendSpec]:
    return [
        RdmaBackendSpec(
            "efa",
            "tetrarch_rdma_efa._efa:EfaRdmaBackend",
            probe=probe,
            priority=90,
            extra="efa",
            summary="AWS EFA through libfabric (TETRARCH_EFA_PROVIDER selects another provider)",
            capabilities=frozenset({Capability.SAME_HOST, Capability.MULTI_HOST}),
        )
    ]
