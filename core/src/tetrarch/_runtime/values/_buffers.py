"""Receive buffers that become ``bytes`` without a copy.

A large frame arrives in memory the receiver allocated before reading it. If that
memory were a ``bytearray``, rebuilding a ``bytes`` argument from it would copy it, and
the receiver would hold the payload twice. :func:`frame_buffer` instead allocates a
fresh ``bytes`` object of the right size (CPython's documented
``PyBytes_FromStringAndSize(NULL, n)``: the object is not shared with anyone until it
is filled) and hands out a *writable* view of its storage to read into. After the
message is complete, :func:`as_bytes` returns that very ``bytes`` object for a view that
covers it whole, and numpy arrays or tensors built over the view stay writable.

The view keeps its ``bytes`` alive, so a caller holding either holds the memory.
Nothing writes into a frame after the transport filled it.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

__all__ = ["as_bytes", "frame_buffer", "tensor_bytes", "tensor_over"]

_OWNER = "_tetrarch_bytes"  # attribute of the ctypes array that names the bytes object it exposes

_new_bytes: Any = None
_bytes_data: Any = None
if sys.implementation.name == "cpython":  # elsewhere frames are bytearrays (one copy for a bytes argument)
    _new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
    _new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    _new_bytes.restype = ctypes.py_object
    _bytes_data = ctypes.pythonapi.PyBytes_AsString
    _bytes_data.argtypes = (ctypes.py_object,)
    _bytes_data.restype = ctypes.c_void_p


def frame_buffer(n: int) -> memoryview:
    """A writable, byte-format view of ``n`` bytes, uninitialised, backed by a fresh ``bytes`` object.

    Fill it before anything reads it. On interpreters other than CPython it is a
    ``bytearray`` (and :func:`as_bytes` copies).
    """
    if _new_bytes is None or n < 2:  # sizes 0 and 1 are shared singletons: never write into those
        return memoryview(bytearray(n))
    owner = _new_bytes(None, n)
    array = (ctypes.c_char * n).from_address(_bytes_data(owner))
    setattr(array, _OWNER, owner)  # the view keeps the bytes object (and so its storage) alive
    return memoryview(array).cast("B")


def as_bytes(buf: Any) -> bytes:
    """``buf`` as ``bytes``: without a copy when it is a ``bytes`` object or a whole :func:`frame_buffer`.

    Raises:
        TypeError: ``buf`` does not support the buffer protocol.
    """
    if type(buf) is bytes:
        return buf
    with memoryview(buf) as view:
        obj = view.obj
        if type(obj) is bytes and view.nbytes == len(obj) and view.c_contiguous:
            return obj
        owner = getattr(obj, _OWNER, None)
        if type(owner) is bytes and view.nbytes == len(owner) and view.c_contiguous:
            return owner
        return view.tobytes()


def tensor_over(buf: Any, dtype: str, shape: tuple[int, ...]) -> Any:
    """A CPU tensor of ``dtype`` and ``shape`` over ``buf`` (a received frame): no copy unless it is read-only."""
    import torch

    view = memoryview(buf).cast("B")
    if view.readonly:  # torch wants writable memory; small messages arrive as bytes
        view = memoryview(bytearray(view))
    flat = torch.frombuffer(view, dtype=torch.uint8) if len(view) else torch.empty(0, dtype=torch.uint8)
    return flat.view(getattr(torch, dtype)).reshape(shape)


def tensor_bytes(t: Any) -> memoryview:
    """A zero-copy byte view of a contiguous CPU tensor that keeps the tensor alive."""
    arr = (ctypes.c_char * t.nbytes).from_address(t.data_ptr())
    arr._tetrarch_owner = t  # keeps the tensor alive as long as the view
    return memoryview(arr).cast("B")
