"""One-sided reads and writes of another process's memory, with Monarch's names (``monarch.rdma``).

::

    from tetrarch.rdma import RDMABuffer

    class Server(Actor):
        def __init__(self) -> None:
            self.weights = torch.zeros(1 << 20)
        @endpoint
        def handle(self) -> RDMABuffer:
            return RDMABuffer(self.weights.view(torch.uint8).flatten())   # registered, not copied

    # any other actor (or the client):
    buf = server.handle.call_one().get()
    buf.read_into(local.view(torch.uint8).flatten()).get()

Backends are plugins (docs/plugins.md); core has ``shm`` (same host) and ``tcp`` (the
fallback). See docs/rdma.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

_EXPORTS = {
    "RDMAAction": "tetrarch._rdma._action",
    "RDMABuffer": "tetrarch._rdma._buffer",
    "RDMAError": "tetrarch._errors",
    "RDMATcpFallbackWarning": "tetrarch._errors",
    "get_rdma_backend": "tetrarch._rdma._info",
    "is_ibverbs_available": "tetrarch._rdma._info",
    "is_rdma_available": "tetrarch._rdma._info",
}

__all__ = [
    "RDMAAction",
    "RDMABuffer",
    "RDMAError",
    "RDMATcpFallbackWarning",
    "get_rdma_backend",
    "is_ibverbs_available",
    "is_rdma_available",
]
# (kept literal so linters see the re-exports; tests/test_public_api.py checks it)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)

if TYPE_CHECKING:  # pragma: no cover
    from ._errors import RDMAError, RDMATcpFallbackWarning
    from ._rdma._action import RDMAAction
    from ._rdma._buffer import RDMABuffer
    from ._rdma._info import get_rdma_backend, is_ibverbs_available, is_rdma_available
