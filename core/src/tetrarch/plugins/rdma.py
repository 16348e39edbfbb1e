"""Everything an RDMA backend plugin's implementation needs: the interfaces and GPU memory helpers.

Import it from the modules that implement the backend (the factory's module), never
from the featherweight entry point module, which imports only :mod:`tetrarch.plugins`.

The interfaces (contracts in their docstrings; docs/rdma.md, "Writing a backend"):
:class:`RdmaBackend`, which the factory builds; :class:`RdmaHost`, what the frontend
hands it at ``start``; :class:`LocalRegion` / :class:`RemoteRegion`, the memory of one
transfer; :class:`PeerIdentity`; :class:`MemoryKind`; :func:`settle`, which completes a
transfer's future unless its deadline or its owner's death ended it first. Errors are
``tetrarch.rdma.RDMAError`` (``tetrarch.RDMAError``).

**GPU memory**: :func:`gpu_runtime` says whether the loaded torch is CUDA or ROCm
(:class:`GpuRuntime`); :func:`export_dmabuf` exports device memory as a dma-buf
(:class:`DmaBuf`) for a NIC registration (verbs' ``ibv_reg_dmabuf_mr``, libfabric's
``FI_MR_DMABUF``).

**Processes**: :func:`probe_in_child` runs a probe that would load a native library in a
short-lived child; :func:`process_gone` says whether a peer process ended (e.g. to
clean up after a killed one).

The test kit is :class:`tetrarch.testing.rdma.RdmaSuite`.
"""

from __future__ import annotations

from .._plugins._helpers import probe_in_child
from .._rdma._backend import LocalRegion, MemoryKind, PeerIdentity, RdmaBackend, RdmaHost, RemoteRegion, settle
from .._rdma._gpu import DmaBuf, GpuRuntime, export_dmabuf, gpu_runtime
from .._runtime.plumbing._proc_state import process_gone

__all__ = [
    "DmaBuf",
    "GpuRuntime",
    "LocalRegion",
    "MemoryKind",
    "PeerIdentity",
    "RdmaBackend",
    "RdmaHost",
    "RemoteRegion",
    "export_dmabuf",
    "gpu_runtime",
    "probe_in_child",
    "process_gone",
    "settle",
]
