"""Device memory through backends that move host memory only: staged through pinned host memory.

``RDMABuffer.read_into(cuda_tensor)`` and ``write_from(cuda_tensor)`` with a backend whose
``memory_kinds`` lack ``CUDA`` (core's ``tcp`` and ``shm``, or a NIC backend without
dma-buf) move the bytes through a page-locked host buffer of the transfer's size: a read
lands there and is then copied to the device; a write is first copied from the device.
Both copies are synchronous on the calling thread's current stream (the read's on the
thread that completes the transfer), so the tensor holds the bytes once the future is
done. Pinned memory makes each copy a DMA at full PCIe speed instead of a pageable copy.

Pinned buffers are kept for reuse (up to :data:`POOL_BYTES`): allocating page-locked
memory costs far more than the copies (cudaHostAlloc of 512 MiB takes a sizeable part of a
second), and a loop of transfers of one size then allocates once.

torch is not imported here unless the memory is a torch tensor already (then it is loaded).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future as CFuture
from typing import Any

from ._backend import LocalRegion, MemoryKind, settle
from ._memory import Memory, view_at

__all__ = ["POOL_BYTES", "Staged", "finish", "stage"]

#: Pinned host memory kept for later staged transfers once theirs are done (bytes).
POOL_BYTES = 1 << 30
_free: list[Any] = []  # pinned uint8 tensors not in use, oldest first
_lock = threading.Lock()


def _take(torch: Any, nbytes: int) -> Any:
    """A pinned uint8 tensor of at least ``nbytes``: the smallest free one that fits, else a new one."""
    with _lock:
        fits = [i for i, t in enumerate(_free) if t.numel() >= nbytes]
        if fits:  # by index: ``==`` on tensors compares their elements
            return _free.pop(min(fits, key=lambda i: _free[i].numel()))
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


def _give(pinned: Any) -> None:
    """``pinned`` is free again: keep it, dropping the oldest while more than POOL_BYTES are kept."""
    with _lock:
        _free.append(pinned)
        while sum(t.numel() for t in _free) > POOL_BYTES:
            _free.pop(0)


class Staged:
    """A host stand-in for a device region: ``memory`` to transfer, ``after`` to run once a read is done."""

    __slots__ = ("after", "memory", "pinned")

    def __init__(self, memory: Memory, after: Callable[[], None] | None, pinned: Any) -> None:
        self.memory = memory
        self.after = after
        self.pinned = pinned  # the pool's tensor, given back once the transfer is done


def stage(local: Memory, write: bool) -> Staged:
    """A pinned host buffer standing in for ``local`` (device memory of a torch tensor).

    For a write the device bytes are copied into it now; for a read, ``after`` copies it
    to the device.

    Raises:
        ValueError: ``local`` is device memory that did not come from a torch tensor.
    """
    region = local.region
    source = getattr(local, "tensor", None)
    if region.kind is not MemoryKind.CUDA or source is None:
        raise ValueError(f"cannot stage {region.kind.value} memory without its torch tensor")
    torch: Any = sys.modules["torch"]
    device_bytes = source.view(torch.uint8)[: region.nbytes]
    pinned = _take(torch, region.nbytes)
    host = pinned[: region.nbytes]
    view = view_at(host.data_ptr(), region.nbytes, host)
    staged = Memory(LocalRegion(host.data_ptr(), region.nbytes, view, MemoryKind.CPU), host)
    if write:
        host.copy_(device_bytes)  # synchronous: the bytes are on the host before the transfer starts
        return Staged(staged, None, pinned)

    def after() -> None:
        device_bytes.copy_(host)  # synchronous: on the device when the caller's future completes

    return Staged(staged, after, pinned)


def finish(staged: Staged, moved: CFuture[None], *, fut: CFuture[None]) -> None:
    """Complete ``fut`` like ``moved`` (the host transfer), after ``staged.after`` (a read's device copy)."""
    error = moved.exception() if not moved.cancelled() else RuntimeError("the RDMA backend cancelled the transfer")
    if error is None and staged.after is not None:
        try:
            staged.after()
        except Exception as exc:  # noqa: BLE001 - the caller's future carries it
            error = exc
    _give(staged.pinned)  # the backend is done with it, and so is the device copy
    settle(fut, error)
