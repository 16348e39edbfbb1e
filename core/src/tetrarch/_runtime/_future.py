"""``Future``: the result of an endpoint call, usable from threads and from asyncio.

* ``get(timeout)`` blocks; a timeout raises ``TimeoutError`` and consumes nothing.
* Results and exceptions are cached: every ``get``/``await`` sees the same outcome.
* ``await fut`` works from any asyncio loop (the completion is handed to that loop).
* Replies are decoded lazily, in the thread that asks for them, not on the I/O thread.
"""

from __future__ import annotations

import _thread
import asyncio
import math
import warnings
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

from .._errors import ArgumentError, ArgumentTypeError, FutureTimeoutError

__all__ = ["Future"]

R = TypeVar("R")

_PENDING, _DONE = 0, 1
_TOKEN = object()
_CB_LOCK = _thread.allocate_lock()


class Future(Generic[R]):
    """The eventual result of an operation on a mesh. Not constructible by users."""

    __slots__ = ("_latch", "_state", "_value", "_error", "_decode", "_callbacks", "_asked", "__weakref__")

    def __init__(self, _token: object = None) -> None:
        if _token is not _TOKEN:
            raise ArgumentTypeError("Future cannot be constructed directly; endpoint calls and meshes return it")
        self._latch = _thread.allocate_lock()
        self._latch.acquire()
        self._state = _PENDING
        self._value: Any = None
        self._error: BaseException | None = None
        self._decode: Callable[[], Any] | None = None
        self._callbacks: list[Callable[[Future[R]], None]] | None = None
        #: Some code asked for the outcome (``get``, ``await``) and will receive it: the
        #: supervisor counts a failure this future reports as seen by the user.
        self._asked = False

    # -- completion (runtime side) ----------------------------------------
    @classmethod
    def _new(cls) -> Future[Any]:
        return cls(_TOKEN)

    @classmethod
    def _completed(cls, value: Any) -> Future[Any]:
        fut = cls(_TOKEN)
        fut._set_result(value)
        return fut

    def _set_result(self, value: Any) -> bool:
        return self._finish(value, None, None)

    def _set_exception(self, error: BaseException) -> bool:
        return self._finish(None, error, None)

    def _set_lazy(self, decode: Callable[[], Any]) -> bool:
        """Complete with ``decode()``'s outcome, computed on first access."""
        return self._finish(None, None, decode)

    def _finish(self, value: Any, error: BaseException | None, decode: Callable[[], Any] | None) -> bool:
        with _CB_LOCK:
            if self._state is not _PENDING:
                return False
            self._value, self._error, self._decode = value, error, decode
            self._state = _DONE
            callbacks, self._callbacks = self._callbacks, None
        self._latch.release()
        for cb in callbacks or ():
            try:
                cb(self)
            except Exception:  # noqa: BLE001 - a faulty callback must not break completion
                pass
        return True

    def _resolve(self) -> Any:
        decode = self._decode
        if decode is not None:
            self._decode = None
            try:
                self._value = decode()
            except BaseException as exc:  # noqa: BLE001 - the decoded outcome may be an error
                self._error = exc
        if self._error is not None:
            raise self._error
        return self._value

    # -- user API -----------------------------------------------------------
    def done(self) -> bool:
        """Whether the outcome is known."""
        return self._state is _DONE

    def get(self, timeout: float | None = None) -> R:
        """Block until the outcome is known and return it (or raise the error).

        Raises:
            TimeoutError: not done within ``timeout`` seconds (the future stays usable).
            ValueError: ``timeout`` is negative or not finite.
            ActorError, SupervisionError: the call failed remotely / the target died.
        """
        if self._state is not _DONE:
            if timeout is not None and (timeout < 0 or not math.isfinite(timeout)):
                raise ArgumentError(f"timeout must be a finite number >= 0 or None, got {timeout!r}")
            self._asked = True
            if _in_running_loop():
                warnings.warn(
                    "Future.get() called from within an active event loop blocks it; use 'await' instead",
                    UserWarning,
                    stacklevel=2,
                )
            if not self._latch.acquire(timeout=-1 if timeout is None else timeout):
                with _CB_LOCK:  # atomic with completion: either we saw it done, or nobody will receive it
                    if self._state is not _DONE:
                        self._asked = False
                        raise FutureTimeoutError(f"result not ready after {timeout} s (the future is still pending)")
            else:
                self._latch.release()
        self._asked = True
        return self._resolve()

    result = get

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error the future ended with, or None.

        Raises:
            TimeoutError: not done within ``timeout`` seconds.
        """
        try:
            self.get(timeout)
        except TimeoutError:
            if not self.done():
                raise
            return self._error
        except BaseException as exc:  # noqa: BLE001
            return exc
        return None

    def add_done_callback(self, fn: Callable[[Future[R]], None]) -> None:
        """Call ``fn(self)`` once done (immediately if already done), on the completing thread."""
        with _CB_LOCK:
            if self._state is not _DONE:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)

    def as_asyncio(self) -> asyncio.Future[R]:
        """An asyncio future of the running loop that completes with this one.

        Raises:
            RuntimeError: no asyncio loop is running in this thread.
        """
        loop = asyncio.get_running_loop()
        afut: asyncio.Future[R] = loop.create_future()
        self._asked = True

        def transfer(_: Future[R]) -> None:
            def settle() -> None:
                if afut.done():
                    return
                try:
                    afut.set_result(self._resolve())
                except BaseException as exc:  # noqa: BLE001
                    afut.set_exception(exc)

            loop.call_soon_threadsafe(settle)

        self.add_done_callback(transfer)
        return afut

    def __await__(self) -> Generator[Any, None, R]:
        if self._state is _DONE:
            self._asked = True
            return self._resolve()
        return (yield from self.as_asyncio().__await__())

    def __repr__(self) -> str:
        return f"<tetrarch.Future {'done' if self._state is _DONE else 'pending'}>"


def _in_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
