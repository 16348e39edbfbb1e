"""The RDMA fallback rule: choosing a core backend while a hardware one is installed warns once, or raises.

A core RDMA backend (``tcp``, ``shm``) chosen while an installed hardware backend
could run once fixed (unavailable, broken, in conflict, incompatible) is a fallback the user should
hear about: one ``RDMATcpFallbackWarning`` per process naming the skipped backends and
their probes' reasons, or ``BackendUnavailable`` when ``TETRARCH_RDMA_FALLBACK=0`` or the
request says ``allow_fallback=False``. A disabled or not implemented backend is no loss. A
request with ``fallback_warning=False`` is checked but not warned about: tetrarch's RDMA
frontend asks so, and warns itself when the ``tcp`` fallback carries a transfer.
"""

from __future__ import annotations

import threading
import warnings

from .._config import RDMA_FALLBACK
from .._errors import RDMATcpFallbackWarning
from ._errors import BackendUnavailable
from ._request import SelectionRequest
from ._rows import describe
from ._specs import BackendKind, BackendSpec, BackendStatus, Status

__all__ = ["FALLBACK_ENV", "check_rdma_fallback"]

FALLBACK_ENV = RDMA_FALLBACK.env
_CORE = "tetrarch"

_fallback_lock = threading.Lock()
_fallback_warned = False


def check_rdma_fallback(chosen: BackendSpec, rows: list[BackendStatus], request: SelectionRequest) -> None:
    """Warn once (or raise) if ``chosen`` is a core backend while a fixable hardware backend was skipped.

    Raises:
        BackendUnavailable: the fallback is disabled (``TETRARCH_RDMA_FALLBACK=0`` or
            ``request.allow_fallback`` is False); its ``remedy`` gathers the skipped backends' remedies.
    """
    row = next(r for r in rows if r.spec is chosen)
    if row.distribution != _CORE:
        return
    fixable = (Status.UNAVAILABLE, Status.BROKEN, Status.CONFLICT, Status.INCOMPATIBLE)
    skipped = [r for r in rows if r.distribution != _CORE and (r.status in fixable or r.on_request)]
    if not skipped:
        return
    detail = "; ".join(describe(r) for r in skipped)
    if not request.allow_fallback or not RDMA_FALLBACK():
        fixes = "; ".join(f"{r.name}: {r.remedy}" for r in skipped if r.remedy)
        raise BackendUnavailable(
            f"no RDMA hardware backend is usable ({detail}) and the fallback to {chosen.name!r} is "
            f"disabled ({FALLBACK_ENV}=0 or allow_fallback=False)", kind=BackendKind.RDMA, name=chosen.name,
            reason=f"no RDMA hardware backend is usable and the fallback to {chosen.name!r} is disabled",
            remedy=(fixes + "; or " if fixes else "") + f"allow the fallback (unset {FALLBACK_ENV}; "
                                                        "allow_fallback=True)",
        )
    if not request.fallback_warning:
        return  # the caller warns where the fallback carries traffic (tetrarch._rdma: a transfer over tcp)
    _warn_once(f"tetrarch RDMA falls back to {chosen.name!r}; skipped: {detail}")


def _warn_once(message: str) -> None:
    global _fallback_warned
    with _fallback_lock:
        if _fallback_warned:
            return
        _fallback_warned = True
    warnings.warn(message, RDMATcpFallbackWarning, stacklevel=4)
