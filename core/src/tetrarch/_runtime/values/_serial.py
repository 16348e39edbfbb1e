"""Pickling for the wire: protocol 5 with out-of-band buffers.

Plain data goes through the C pickler. Only when the stream refers to ``__main__`` (a
class or function of the user's script, which the remote process cannot import) or
the C pickler refuses (lambdas, local functions) do we fall back to cloudpickle, which
pickles those by value. Large contiguous buffers (``bytes`` and ``bytearray`` — also inside
the arguments' tuples, lists and dicts —, contiguous memoryviews, numpy arrays (a
non-contiguous one copied once into a contiguous one) and CPU torch tensors) travel out of
band: the transport sends them as their own frames without a copy into the pickle stream
(to a process of the same host, through shared memory: :mod:`._shm_wire`). The receiver
rebuilds ``bytes``, memoryviews and arrays over the received frame without a copy (a large
frame arrives in its own buffer, see :mod:`._buffers`); a ``bytearray`` gets its own copy.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import pickle
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from ..._errors import ArgumentTypeError
from . import _cuda
from ._buffers import as_bytes, tensor_bytes, tensor_over
from ._cuda import CudaTensorOnCpuWarning

__all__ = ["CudaTensorOnCpuWarning", "PicklingError", "arg_parts", "dumps", "dumps_checked", "loads", "type_name"]

PicklingError = pickle.PicklingError
_MAIN = b"__main__"
_PROTOCOL = 5
_OOB_MIN = 1 << 14  # buffers smaller than this are cheaper inline


def _shared_file(t: Any) -> tuple[int, int, int] | None:
    """``(fd, offset, nbytes)`` of a contiguous tensor whose storage is a shared file of this process.

    Only for storages shared with torch's ``file_descriptor`` strategy (``share_memory_()``
    on Linux by default, and tensors received through ``torch.multiprocessing``): asking
    any other storage for its descriptor would move it into shared memory.
    """
    if not t.is_shared() or not t.is_contiguous():
        return None
    import torch.multiprocessing as mp

    if mp.get_sharing_strategy() != "file_descriptor":
        return None
    storage = t.untyped_storage()
    try:
        fd, _ = storage._share_fd_cpu_()
    except (RuntimeError, AttributeError):
        return None
    return fd, t.data_ptr() - storage.data_ptr(), t.nbytes


def _reduce_tensor(t: Any) -> Any:
    if t.device.type == "cuda" and not (t.requires_grad or t.is_sparse or t.is_quantized or t.is_nested):
        return _cuda.reduce(t)
    if (t.device.type != "cpu" or t.requires_grad or t.is_sparse or t.is_quantized or t.is_nested
            or t.nbytes < _OOB_MIN):
        return NotImplemented
    t = t.detach()
    shared = _shared_file(t)
    t = t.contiguous()
    view = tensor_bytes(t)
    if shared is not None:
        owner: Any = view.obj
        owner._tetrarch_shared = shared  # to a process of this host, the file goes instead (``_shm_wire``)
    return (tensor_over, (pickle.PickleBuffer(view), str(t.dtype).removeprefix("torch."), tuple(t.shape)))


class _BigBytes:
    """Stands in for a large ``bytes`` or ``bytearray`` while pickling, so it travels out of band.

    The C pickler writes exact ``bytes`` and ``bytearray`` in band without asking
    ``reducer_override``, so :func:`dumps` swaps large ones (in the object and its
    containers, a few levels deep) for this wrapper. The receiver rebuilds the same
    type with one copy.
    """

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data

    def __reduce_ex__(self, protocol: Any) -> Any:
        data = self.data
        return (as_bytes if type(data) is bytes else bytearray, (pickle.PickleBuffer(data),))


def _rebuild_view(buf: Any, fmt: str, shape: tuple[int, ...]) -> memoryview:
    view: Any = memoryview(buf).cast("B")  # read-only stays read-only (pickle's READONLY_BUFFER)
    return view.cast(fmt, shape) if (fmt, shape) != ("B", (view.nbytes,)) else view


def _reduce_view(view: Any) -> Any:
    """A large C-contiguous ``memoryview``: out of band, rebuilt with its format and shape."""
    if view.nbytes < _OOB_MIN or not view.c_contiguous:
        return NotImplemented
    shape = tuple(view.shape or ())
    try:
        flat = view.cast("B")
        flat.cast(view.format, shape)  # a format ``cast`` cannot restore keeps the copying fallback
    except (TypeError, ValueError):
        return NotImplemented
    return (_rebuild_view, (pickle.PickleBuffer(flat), view.format, shape))


_LIFT_DEPTH = 3  # (args, kwargs) -> each argument -> its items


def _lift_bytes(obj: Any, depth: int = _LIFT_DEPTH) -> Any:
    """``obj`` with large ``bytes`` (itself or in tuples, lists and dict values) wrapped as :class:`_BigBytes`."""
    kind = type(obj)
    if kind is bytes or kind is bytearray:
        return _BigBytes(obj) if len(obj) >= _OOB_MIN else obj
    if not depth:
        return obj
    if kind is tuple or kind is list:
        lifted = [_lift_bytes(x, depth - 1) for x in obj]
        if any(new is not old for new, old in zip(lifted, obj, strict=True)):
            return kind(lifted)
    elif kind is dict:
        values = {k: _lift_bytes(v, depth - 1) for k, v in obj.items()}
        if any(values[k] is not v for k, v in obj.items()):
            return values
    return obj


def _reduce_buffer(obj: Any) -> Any:
    """Out-of-band reduction of a large memoryview or CPU tensor; NotImplemented for anything else."""
    kind = type(obj)
    if kind is memoryview:
        return _reduce_view(obj)
    torch = sys.modules.get("torch")
    if torch is not None and kind is torch.Tensor:
        return _reduce_tensor(obj)
    np = sys.modules.get("numpy")
    if np is not None and kind is np.ndarray:
        return _reduce_array(np, obj)
    return NotImplemented


def _reduce_array(np: Any, a: Any) -> Any:
    """A large non-contiguous array, copied once into a contiguous one that travels out of band.

    numpy itself would copy it into the pickle stream (``tobytes``), where it could not
    travel as a buffer of its own (through shared memory, or received in place).
    """
    flags = a.flags
    if flags.c_contiguous or flags.f_contiguous or a.nbytes < _OOB_MIN or a.dtype.hasobject:
        return NotImplemented
    return np.ascontiguousarray(a).__reduce_ex__(_PROTOCOL)


class _Pickler(pickle.Pickler):
    """C pickler plus out-of-band memoryviews and CPU tensors (when torch is already imported)."""

    def reducer_override(self, obj: Any) -> Any:  # only reached for non-builtin types
        return _reduce_buffer(obj)


#: What cloudpickle (3.1.3 on) writes as the file name of every code object it pickles by value.
_DYNAMIC_CODE = "<dynamic-code>"


def _reduce_code(reduce: Callable[[Any], Any], code: types.CodeType) -> Any:
    """cloudpickle's reduction of ``code``, keeping its real file name.

    cloudpickle 3.1.3 replaced ``co_filename`` by ``<dynamic-code>`` (deterministic payloads):
    a remote traceback through a class of the user's script then showed neither its file
    nor its source lines. The file name is the one constructor argument with that value.
    """
    rebuild, args = reduce(code)
    if code.co_filename != _DYNAMIC_CODE and _DYNAMIC_CODE in args:
        args = tuple(code.co_filename if arg == _DYNAMIC_CODE else arg for arg in args)
    return rebuild, args


@functools.cache
def _cloud_pickler() -> type[pickle.Pickler]:
    """cloudpickle's pickler (by-value classes and functions) plus out-of-band memoryviews and CPU
    tensors, and code objects that keep their file names (:func:`_reduce_code`); made at first
    use, since most processes never pickle anything by value (unpickling needs no pickler)."""
    import cloudpickle

    class _CloudPickler(cloudpickle.CloudPickler):
        def reducer_override(self, obj: Any) -> Any:
            if type(obj) is types.CodeType:
                return _reduce_code(self.dispatch_table[types.CodeType], obj)
            reduced = _reduce_buffer(obj)
            if reduced is not NotImplemented:
                return reduced
            return super().reducer_override(obj)

    return _CloudPickler


def _buffer_callback(out: list, inline_small: bool = True) -> Callable[[pickle.PickleBuffer], bool]:
    def cb(buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if inline_small and raw.nbytes < _OOB_MIN and type(raw.obj) is not _cuda.Pending:
            return True  # serialize in band
        out.append(raw)
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
    obj = _lift_bytes(obj)
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
    _cloud_pickler()(f, protocol=_PROTOCOL, buffer_callback=_buffer_callback(bufs)).dump(obj)
    return [f.getvalue(), *bufs]


def arg_parts(args: Sequence[Any], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(description, value)`` per call argument, for :func:`dumps_checked` to blame."""
    return [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"argument {k!r}", v) for k, v in kwargs.items()]


def type_name(value: object) -> str:
    """``value``'s type as a user reads it: ``_thread.lock``, ``numpy.ndarray``, ``dict``."""
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module in ("builtins", "__main__") else f"{module}.{kind.__qualname__}"


def _alternatives() -> str:
    """What can travel instead of an unpicklable value; RDMABuffer only once ``tetrarch.rdma`` exists."""
    rdma = ", an RDMABuffer for memory the receiver reads remotely" if _has_module("tetrarch.rdma") else ""
    return f"plain data, numpy arrays, tensors, an actor mesh or a Port{rdma}"


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


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
                    f"{what}: {desc} of type {type_name(value)} cannot be pickled "
                    f"({type(inner).__name__}: {inner}); pass picklable values instead ({_alternatives()})"
                ) from inner
        raise ArgumentTypeError(f"{what} cannot be pickled ({type(exc).__name__}: {exc})") from exc


def loads(frames: Sequence[Any]) -> Any:
    """Inverse of :func:`dumps`."""
    if len(frames) == 1:  # no out-of-band buffers (most replies): no list of them to build
        return pickle.loads(frames[0])
    return pickle.loads(frames[0], buffers=frames[1:])
