"""Pickling for the wire: protocol 5 with out-of-band buffers.

Plain data goes through the C pickler. Only when the stream refers to ``__main__`` (a
class or function of the user's script, which the remote process cannot import) or
the C pickler refuses (lambdas, local functions) do we fall back to cloudpickle, which
pickles those by value. Large contiguous buffers (bytes-like objects, numpy arrays and
CPU torch tensors) travel out of band: the transport sends them as their own frames
without a copy into the pickle stream.
"""

from __future__ import annotations

import ctypes
import io
import pickle
import sys
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle

from .._errors import ArgumentTypeError

__all__ = ["PicklingError", "arg_parts", "dumps", "dumps_checked", "loads"]

PicklingError = pickle.PicklingError
_MAIN = b"__main__"
_PROTOCOL = 5
_OOB_MIN = 1 << 14  # buffers smaller than this are cheaper inline


def _rebuild_tensor(buf: Any, dtype: str, shape: tuple[int, ...]) -> Any:
    import torch

    view = memoryview(buf).cast("B")
    if view.readonly:  # torch wants writable memory; small messages arrive as bytes
        view = memoryview(bytearray(view))
    flat = torch.frombuffer(view, dtype=torch.uint8) if len(view) else torch.empty(0, dtype=torch.uint8)
    return flat.view(getattr(torch, dtype)).reshape(shape)


def _tensor_bytes(t: Any) -> memoryview:
    """A zero-copy byte view of a contiguous CPU tensor that keeps the tensor alive."""
    arr = (ctypes.c_char * t.nbytes).from_address(t.data_ptr())
    arr._tetrarch_owner = t  # keeps the tensor alive as long as the view
    return memoryview(arr).cast("B")


def _reduce_tensor(t: Any) -> Any:
    if (t.device.type != "cpu" or t.requires_grad or t.is_sparse or t.is_quantized or t.is_nested
            or t.nbytes < _OOB_MIN):
        return NotImplemented
    t = t.detach().contiguous()
    return (_rebuild_tensor, (pickle.PickleBuffer(_tensor_bytes(t)), str(t.dtype).removeprefix("torch."),
                              tuple(t.shape)))


class _Pickler(pickle.Pickler):
    """C pickler plus out-of-band CPU tensors when torch is already imported."""

    def reducer_override(self, obj: Any) -> Any:  # only reached for non-builtin types
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) is torch.Tensor:
            return _reduce_tensor(obj)
        return NotImplemented


class _CloudPickler(cloudpickle.CloudPickler):
    """cloudpickle (by-value classes and functions) plus out-of-band CPU tensors."""

    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) is torch.Tensor:
            reduced = _reduce_tensor(obj)
            if reduced is not NotImplemented:
                return reduced
        return super().reducer_override(obj)


def _buffer_callback(out: list, inline_small: bool = True) -> Callable[[pickle.PickleBuffer], bool]:
    def cb(buf: pickle.PickleBuffer) -> bool:
        if inline_small and buf.raw().nbytes < _OOB_MIN:
            return True  # serialize in band
        out.append(buf.raw())
        return False

    return cb


_SCALARS = frozenset({type(None), bool, int, float, str, complex})
_NONE = pickle.dumps(None, _PROTOCOL)


def dumps(obj: Any) -> list[Any]:
    """Pickle ``obj`` into ``[stream, *out_of_band_buffers]``.

    Raises:
        pickle.PicklingError, TypeError, AttributeError: ``obj`` cannot be pickled.
    """
    if obj is None:
        return [_NONE]
    if type(obj) in _SCALARS:  # the common small results: no pickler object needed
        return [pickle.dumps(obj, _PROTOCOL)]
    bufs: list[Any] = []
    f = io.BytesIO()
    try:
        _Pickler(f, _PROTOCOL, buffer_callback=_buffer_callback(bufs)).dump(obj)
        data = f.getvalue()
        if _MAIN not in data:
            return [data, *bufs]
    except (pickle.PicklingError, AttributeError, TypeError):
        pass
    bufs.clear()
    f = io.BytesIO()
    _CloudPickler(f, protocol=_PROTOCOL, buffer_callback=_buffer_callback(bufs)).dump(obj)
    return [f.getvalue(), *bufs]


def arg_parts(args: Sequence[Any], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(description, value)`` per call argument, for :func:`dumps_checked` to blame."""
    return [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"argument {k!r}", v) for k, v in kwargs.items()]


def dumps_checked(obj: Any, what: str, parts: Sequence[tuple[str, Any]] = ()) -> list[Any]:
    """:func:`dumps`, raising a ``TypeError`` that names the offending part and its type.

    ``parts`` lists ``(description, value)`` pairs (e.g. each argument) to blame.

    Raises:
        TypeError: something in ``obj`` cannot be pickled.
    """
    try:
        return dumps(obj)
    except Exception as exc:
        for desc, value in parts:
            try:
                dumps(value)
            except Exception as inner:
                raise ArgumentTypeError(
                    f"{what}: {desc} of type {type(value).__qualname__} cannot be pickled "
                    f"({type(inner).__name__}: {inner}); pass picklable values (or an RDMABuffer / "
                    f"an actor mesh reference) instead"
                ) from inner
        raise ArgumentTypeError(f"{what} cannot be pickled ({type(exc).__name__}: {exc})") from exc


def loads(frames: Sequence[Any]) -> Any:
    """Inverse of :func:`dumps`."""
    return pickle.loads(frames[0], buffers=frames[1:])
