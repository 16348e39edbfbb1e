"""Which RDMA backends are usable here: ``get_rdma_backend()`` and friends."""

from __future__ import annotations

import warnings

from .._plugins import BackendKind, Status, get_registry
from ._fallback_warning import QUIET

__all__ = ["get_rdma_backend", "is_ibverbs_available", "is_rdma_available"]


def get_rdma_backend() -> str:
    """The RDMA backend this process would choose (``"tcp"``, ``"shm"``, ``"efa"``, ...), or ``"none"``.

    Follows the selection of docs/plugins.md §4 (setting, hooks, priority). A transfer
    may still use another backend the buffer's owner shares with us (``RDMABuffer.backend``).
    """
    try:
        return get_registry().select(BackendKind.RDMA, request=QUIET).name
    except Exception:  # noqa: BLE001 - no usable backend: Monarch answers "none"
        return "none"


def is_ibverbs_available() -> bool:
    """Whether an ibverbs RDMA backend (``verbs``) is available here (installed, implemented, a device)."""
    return any(r.name == "verbs" and r.status is Status.AVAILABLE for r in get_registry().statuses(BackendKind.RDMA))


def is_rdma_available() -> bool:
    """Deprecated alias of :func:`is_ibverbs_available` (as in Monarch)."""
    warnings.warn("is_rdma_available() is deprecated; use is_ibverbs_available()", DeprecationWarning, stacklevel=2)
    return is_ibverbs_available()
