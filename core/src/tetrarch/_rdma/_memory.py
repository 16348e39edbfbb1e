"""User memory (torch tensors, numpy arrays, memoryviews) as :class:`LocalRegion`, checked.

torch and numpy are never imported here: an object is recognised by its type's module.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .._errors import ArgumentError, ArgumentTypeError
from ._backend import LocalRegion, MemoryKind

__all__ = ["FIX", "Memory", "as_memory", "owner_of", "view_at"]

#: The idiom that turns any contiguous tensor into what RDMABuffer takes.
FIX = "pass a 1-D contiguous byte view, e.g. t.view(torch.uint8).flatten() (numpy: a.reshape(-1).view(np.uint8))"


class Memory:
    """A checked region plus the object whose lifetime decides the memory's (``root``)."""

    __slots__ = ("region", "root", "tensor")

    def __init__(self, region: LocalRegion, root: object, tensor: object = None) -> None:
        self.region = region
        self.root = root
        #: For device memory: the 1-D tensor it came from (to stage it through host memory).
        self.tensor = tensor


def _kind_of(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]


def view_at(address: int, nbytes: int, keep: object) -> memoryview:
    """A writable byte view of ``nbytes`` at ``address`` that keeps ``keep`` alive while it lives."""
    array = (ctypes.c_char * nbytes).from_address(address)
    array._tetrarch_keep = keep  # type: ignore[attr-defined]
    return memoryview(array).cast("B")


def _root_of(obj: Any, attr: str) -> Any:
    """The object at the end of the ``attr`` chain (a view's base)."""
    while getattr(obj, attr, None) is not None:
        obj = getattr(obj, attr)
    return obj


def owner_of(data: Any) -> object:
    """The object that owns ``data``'s memory: the memory is freed when it is collected, and not before.

    A registration's lifetime is anchored here (``Memory.root``), never on the view it was
    made from, which callers drop at once (``RDMABuffer(t.view(torch.uint8).flatten())``):

    * torch: the tensor's storage (``untyped_storage()``), shared by every view. A ``_base``
      chain is no guide: a dtype view has ``_base is None`` (torch 2.13). torch keeps one
      Python object per storage for as long as the storage lives, even with no Python
      reference to it (``t.untyped_storage() is t.untyped_storage()``), and frees that
      object with the memory, so a weak reference to it dies exactly when the memory goes.
      A torch that makes a fresh wrapper per call falls back to the head of the ``_base`` chain.
    * numpy: the end of the ``base`` chain, followed on into a torch tensor (``t.numpy()``)
      or a buffer's exporter (``np.frombuffer``).
    * memoryview: its exporter (``obj``), followed on the same way.
    """
    obj = data
    for _ in range(64):  # real chains are a few links long
        module = _kind_of(obj)
        if module == "torch" and callable(getattr(obj, "untyped_storage", None)) and hasattr(obj, "_base"):
            storage = obj.untyped_storage()
            return storage if obj.untyped_storage() is storage else _root_of(obj, "_base")
        if module == "numpy" and getattr(obj, "base", None) is not None:
            obj = obj.base
        elif isinstance(obj, memoryview):
            obj = obj.obj
        else:
            return obj
    return obj


def as_memory(data: Any, what: str, *, writable: bool) -> Memory:
    """``data`` as a checked 1-D contiguous region of this process's memory (CPU, or a CUDA/ROCm tensor).

    Raises:
        TypeError: not a torch tensor, numpy array or memoryview (or bytes-like), or a
            read-only one where ``writable`` is needed.
        ValueError: empty, multi-dimensional or non-contiguous (the message gives the fix), or on a
            device other than CPU and CUDA/ROCm. CUDA memory gives a region of ``MemoryKind.CUDA``
            without a view: only backends whose ``memory_kinds`` include it take it.
    """
    module = _kind_of(data)
    if module == "torch":
        return _torch(data, what, writable)
    if module == "numpy":
        return _numpy(data, what, writable)
    if isinstance(data, (bytes, bytearray, memoryview)) or hasattr(data, "__buffer__"):
        return _view(data, what, writable)
    raise ArgumentTypeError(f"{what} must be a torch tensor, a numpy array or a 1-D C-contiguous memoryview, "
                            f"got {type(data).__module__}.{type(data).__qualname__}")


def _check_shape(ndim: int, nbytes: int, contiguous: bool, what: str, shape: object) -> None:
    if nbytes == 0:
        raise ArgumentError(f"{what} is empty (0 bytes): an RDMA buffer needs at least one byte")
    if ndim != 1:
        raise ArgumentError(f"{what} has shape {shape} ({ndim} dimensions) but must be 1-D; {FIX}")
    if not contiguous:
        raise ArgumentError(f"{what} is not contiguous (a strided view); call .contiguous() first, then {FIX}")


def _torch(t: Any, what: str, writable: bool) -> Memory:
    nbytes = t.numel() * t.element_size()
    if t.device.type == "cuda":  # ROCm tensors too (torch.version.hip tells them apart: _gpu.py)
        _check_shape(t.dim(), nbytes, t.is_contiguous(), what, tuple(t.shape))
        region = LocalRegion(t.data_ptr(), nbytes, None, MemoryKind.CUDA, t.device.index or 0)
        return Memory(region, owner_of(t), t)
    if t.device.type != "cpu":
        raise ArgumentError(f"{what} lives on {t.device}; RDMA moves CPU and CUDA/ROCm memory: copy it with .cpu()")
    _check_shape(t.dim(), nbytes, t.is_contiguous(), what, tuple(t.shape))
    address = t.data_ptr()
    return Memory(LocalRegion(address, nbytes, view_at(address, nbytes, t)), owner_of(t))


def _numpy(a: Any, what: str, writable: bool) -> Memory:
    _check_shape(a.ndim, a.nbytes, bool(a.flags["C_CONTIGUOUS"]), what, a.shape)
    if writable and not a.flags["WRITEABLE"]:
        raise ArgumentTypeError(f"{what} is a read-only numpy array; pass a writable one (a.copy())")
    address = a.ctypes.data
    return Memory(LocalRegion(address, a.nbytes, view_at(address, a.nbytes, a)), owner_of(a))


def _view(data: Any, what: str, writable: bool) -> Memory:
    mv = data if isinstance(data, memoryview) else memoryview(data)
    _check_shape(mv.ndim, mv.nbytes, mv.c_contiguous, what, mv.shape)
    if mv.readonly:
        if writable:
            raise ArgumentTypeError(f"{what} is read-only ({type(mv.obj).__name__}); pass writable memory, "
                                    f"e.g. a bytearray or memoryview(bytearray(...))")
        return Memory(LocalRegion(0, mv.nbytes, mv.cast("B")), owner_of(mv))
    byte_view = mv.cast("B")
    address = ctypes.addressof(ctypes.c_char.from_buffer(byte_view))
    return Memory(LocalRegion(address, mv.nbytes, view_at(address, mv.nbytes, mv.obj)), owner_of(mv))
