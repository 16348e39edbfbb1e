"""GPU memory for RDMA backends: which runtime owns a device pointer, and its dma-buf export.

A backend that registers device memory with a NIC (verbs' ``ibv_reg_dmabuf_mr``,
libfabric's ``FI_MR_DMABUF``) needs a dma-buf file descriptor for the pages:

* CUDA: ``cuMemGetHandleForAddressRange(..., CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)`` from
  ``libcuda.so.1`` (driver >= 515, and the kernel's dma-buf support for the GPU);
* ROCm: ``hsa_amd_portable_export_dmabuf`` from ``libhsa-runtime64.so.1``.

torch reports ROCm devices as ``cuda`` too; ``torch.version.hip`` tells them apart. The
export covers whole pages, so it returns the page-aligned start's fd plus the region's
offset inside it. Nothing is loaded until a function is called.
"""

from __future__ import annotations

import ctypes
import enum
import os
import sys
from dataclasses import dataclass

from .._errors import RDMAError

__all__ = ["DmaBuf", "GpuRuntime", "export_dmabuf", "gpu_runtime"]

_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1


class GpuRuntime(enum.Enum):
    """The GPU runtime that owns device memory (what :func:`gpu_runtime` answers)."""

    CUDA = "cuda"
    ROCM = "rocm"


def gpu_runtime() -> GpuRuntime:
    """CUDA or ROCm, from the torch that is loaded (``torch.version.hip`` is set on ROCm builds).

    Raises:
        RDMAError: torch is not imported (device memory only comes from torch here).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        raise RDMAError("device memory needs torch (no torch module is loaded)")
    return GpuRuntime.ROCM if getattr(torch.version, "hip", None) else GpuRuntime.CUDA


@dataclass(frozen=True, slots=True)
class DmaBuf:
    """A dma-buf fd covering ``[base, base + length)`` of device memory; the region starts at ``offset``.

    The caller owns ``fd`` and closes it (``os.close``) once the NIC registration holds the pages.
    """

    fd: int
    base: int
    length: int
    offset: int


def _page_span(address: int, nbytes: int) -> tuple[int, int]:
    page = os.sysconf("SC_PAGE_SIZE")
    base = address & ~(page - 1)
    end = (address + nbytes + page - 1) & ~(page - 1)
    return base, end - base


def export_dmabuf(address: int, nbytes: int) -> DmaBuf:
    """A dma-buf for device memory at ``address`` (``nbytes`` long), exported by its GPU runtime.

    Raises:
        RDMAError: the runtime's library is missing, or the export failed (the message names the
            call, its error code and the usual fixes: a driver without dma-buf support, memory
            from an allocator the export does not cover).
    """
    base, length = _page_span(address, nbytes)
    if gpu_runtime() is GpuRuntime.ROCM:
        return _export_rocm(address, nbytes)
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise RDMAError(f"cannot load libcuda.so.1 to export device memory as dma-buf: {exc}") from exc
    fd = ctypes.c_int(-1)
    rc = cuda.cuMemGetHandleForAddressRange(ctypes.byref(fd), ctypes.c_uint64(base), ctypes.c_size_t(length),
                                            ctypes.c_int(_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD),
                                            ctypes.c_ulonglong(0))
    if rc != 0:
        raise RDMAError(f"cuMemGetHandleForAddressRange(DMA_BUF_FD) failed with CUresult {rc} for {length} bytes at "
                        f"{base:#x}: the driver or kernel lacks dma-buf support for this GPU (needs driver >= 515 "
                        f"with the open kernel modules, or nvidia-peermem), or the memory is not from cudaMalloc; "
                        f"the transfer can stage through host memory instead (any backend without CUDA support)")
    return DmaBuf(fd.value, base, length, address - base)


def _export_rocm(address: int, nbytes: int) -> DmaBuf:
    try:
        hsa = ctypes.CDLL("libhsa-runtime64.so.1")
    except OSError as exc:
        raise RDMAError(f"cannot load libhsa-runtime64.so.1 to export ROCm memory as dma-buf: {exc}") from exc
    fd = ctypes.c_int(-1)
    offset = ctypes.c_uint64(0)
    rc = hsa.hsa_amd_portable_export_dmabuf(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), ctypes.byref(fd),
                                            ctypes.byref(offset))
    if rc != 0:
        raise RDMAError(f"hsa_amd_portable_export_dmabuf failed with hsa_status {rc:#x} for {nbytes} bytes at "
                        f"{address:#x}: needs ROCm >= 5.6 and a kernel with dma-buf support for the GPU")
    return DmaBuf(fd.value, address - offset.value, nbytes + offset.value, offset.value)
