"""How an endpoint's failure travels: an :class:`~._wire.ErrorRecord` out, an exception back.

One place builds error records (endpoints, failed ``__init__``, ``Port.exception``)
and one place turns a non-``OK`` port message back into the exception its reader sees.
"""

from __future__ import annotations

import traceback

from ..._errors import ActorError, RemoteException, SupervisionError
from . import _serial, _wire

__all__ = ["decode_error", "error_record", "unpicklable_result"]


def error_record(exc: BaseException, actor: str, method: str, skip: int = 1) -> _wire.ErrorRecord:
    """The record of ``exc`` raised by ``actor.method``, always picklable.

    ``skip`` drops that many innermost-first frames of the runtime from the traceback.
    """
    tb = exc.__traceback__
    for _ in range(skip):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    text = "".join(traceback.TracebackException(type(exc), exc, tb).format())
    try:
        _serial.dumps(exc)
        carried: BaseException = exc
    except Exception:  # noqa: BLE001 - any pickling failure: send a stand-in
        carried = RemoteException(type(exc).__qualname__, str(exc))
    return _wire.ErrorRecord(carried, text, actor, method)


def unpicklable_result(exc: BaseException, value: object, actor: str = "", method: str = "") -> _wire.ErrorRecord:
    """The record sent instead of ``value``, a result of ``actor.method`` that could not be pickled (``exc``)."""
    why = (f"the result (of type {_serial.type_name(value)}) could not be pickled ({type(exc).__name__}: {exc}); "
           f"return picklable values (plain data, numpy arrays, tensors, actor meshes)")
    return _wire.ErrorRecord(RemoteException("PicklingError", why), "", actor, method)


def decode_error(status: int, payload: list, what: str) -> BaseException:
    """The exception a reader of a non-``OK`` port message gets (``what``: ``actor.method``)."""
    value = _serial.loads(payload)
    if status == _wire.DEAD:
        return SupervisionError(f"Endpoint call {what} failed: {value}", what)
    if not isinstance(value, tuple) or len(value) != 4:
        return RemoteException("Error", repr(value))
    exc, tb, actor, method = value
    return ActorError(exc, tb, actor or what.rsplit(".", 1)[0], method or what.rsplit(".", 1)[-1])
