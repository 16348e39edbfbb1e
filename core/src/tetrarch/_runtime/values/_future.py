"""``Future``: the result of an endpoint call, usable from threads and from asyncio.

* ``get(timeout)`` blocks; a timeout raises ``TimeoutError`` and consumes nothing.
* Results and exceptions are cached: every ``get``/``await`` sees the same outcome.
* ``await fut`` works from any asyncio loop (the completion is handed to that loop).
* Replies are decoded lazily, in the thread that asks for them, not on the I/O thread.
* A thread blocked in ``get`` reads for the transport's I/O loop while nobody else does
  (:meth:`tetrarch.plugins.LeaderLoop.try_lead`), so its reply wakes it directly.

``get`` from a thread whose asyncio loop runs (a Jupyter cell, code under ``asyncio.run``)
works and says nothing: tetrarch never delivers a result through the caller's loop (replies
are read by whichever thread reads for the transport loop: its I/O thread, a thread waiting
in ``get``, or in a proc an idle actor thread; they are handed to an awaiting loop with
``call_soon_threadsafe``), so blocking that loop cannot keep the result from coming. Only
an actor's own loop is different: blocking it stalls the actor's other handlers, so ``get``
there warns (use ``await``), and a wait that could never end (for a call to the waiting
actor itself) raises :class:`~tetrarch.UsageError` instead of hanging. A ``KeyboardInterrupt``
(Ctrl-C, a notebook's interrupt button) during ``get`` asks the actors to cancel the call
before it propagates.
"""

from __future__ import annotations

import _thread
import asyncio
import math
import time
import warnings
import weakref
from collections.abc import Callable, Coroutine, Generator
from types import MethodType as _MethodType
from typing import Any, Generic, Protocol, TypeVar

from ..._errors import ArgumentError, ArgumentTypeError, FutureTimeoutError
from ..._telemetry import _caller

__all__ = ["CoroutineFuture", "Future", "use_loop"]


class _Call(Protocol):
    """What a future knows of the endpoint call it stands for (``_endpoint``)."""

    def check_wait(self, blocking: bool) -> None:
        """Raise ``UsageError`` if waiting now, on this thread, could never end (``blocking``: ``get``)."""

    def interrupted(self) -> None:
        """The waiting caller was interrupted (``KeyboardInterrupt``): cancel the call."""


class _Loop(Protocol):
    """What a waiting thread needs of a transport's I/O loop (``tetrarch.plugins.LeaderLoop``)."""

    led: bool

    @property
    def stopped(self) -> bool: ...

    def try_lead(self) -> bool: ...
    def lead_once(self, deadline: float | None, poll: bool = False) -> bool: ...
    def leave(self) -> None: ...
    def follow(self) -> bool: ...
    def followed(self) -> None: ...
    def in_loop(self) -> bool: ...
    def kick(self) -> None: ...


R = TypeVar("R")

_PENDING, _DONE = 0, 1
_TOKEN = object()
_CB_LOCK = _thread.allocate_lock()
_loop: _Loop | None = None  # the I/O loop a waiting thread may read for
#: The asyncio loops that run actor code: ``get`` on one of them blocks an actor.
_actor_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def runs_actor_code(loop: asyncio.AbstractEventLoop) -> None:
    """Note that ``loop`` runs an actor's handlers: ``Future.get`` warns there (use ``await``)."""
    _actor_loops.add(loop)


def use_loop(loop: _Loop | None) -> None:
    """Let threads that wait for a future read for ``loop``, the newest router's transport's
    (None: that transport runs its handlers on its own threads only; waiting threads sleep)."""
    global _loop
    _loop = loop


class Future(Generic[R]):
    """The eventual result of an operation on a mesh. Not constructible by users."""

    __slots__ = ("_latch", "_state", "_value", "_error", "_decode", "_decode_self", "_callbacks", "_asked",
                 "_waiter", "_poll", "_call", "__weakref__")

    def __init__(self, _token: object = None) -> None:
        if _token is not _TOKEN:
            raise ArgumentTypeError("Future cannot be constructed directly; endpoint calls and meshes return it")
        #: Held until done, made for the first thread that sleeps on the future (:meth:`_sleeper`):
        #: most never need it (a waiting thread reads for the loop; pipelined futures are done
        #: when asked), and a lock per future was one more object for the garbage collector.
        self._latch: Any = None
        self._state = _PENDING
        self._value: Any = None
        self._error: BaseException | None = None
        #: What computes the outcome on first access (:meth:`_set_lazy`): called with no argument,
        #: or with ``_decode_self`` when that is not None (a bound method, kept as its two halves).
        self._decode: Callable[..., Any] | None = None
        self._decode_self: Any = None
        self._callbacks: list[Callable[[Future[R]], None]] | None = None
        #: Some code asked for the outcome (``get``, ``await``) and will receive it: the
        #: supervisor counts a failure this future reports as seen by the user.
        self._asked = False
        self._waiter: _Loop | None = None  # the loop a thread in get() sleeps on (counted as its follower)
        #: A thread in get() that reads for the loop polls before it sleeps (the loop's
        #: ``spin_s``): set for a wait on one reply. A wait on many sleeps at once: its replies
        #: come from several processes, which need the CPUs more than the waiter does.
        self._poll = False
        #: The endpoint call this future stands for (None: not a call): checks a wait, cancels
        #: the call when its waiter is interrupted.
        self._call: _Call | None = None

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
        """Complete with ``decode()``'s outcome, computed on first access.

        A bound method is kept as its function and its object: the method object goes at once
        instead of living until the future is read (one object less per done future for the
        garbage collector to walk; a pipeline holds many).
        """
        if type(decode) is _MethodType:
            return self._finish(None, None, decode.__func__, decode.__self__)
        return self._finish(None, None, decode)

    def _finish(self, value: Any, error: BaseException | None, decode: Callable[..., Any] | None,
                bound: Any = None) -> bool:
        with _CB_LOCK:
            if self._state is not _PENDING:
                return False
            self._value, self._error, self._decode, self._decode_self = value, error, decode, bound
            self._state = _DONE
            callbacks, self._callbacks = self._callbacks, None
            waiter, self._waiter = self._waiter, None
            latch = self._latch
            # A done future checks and cancels nothing: its call (and the objects that hang on
            # it) can go now, not when the future is read (a pipeline holds many done ones).
            self._call = None
        if latch is not None:
            latch.release()
        if waiter is not None:
            waiter.followed()
        loop = _loop
        if loop is not None and loop.led and not loop.in_loop():
            loop.kick()  # completed off the loop: wake the thread reading for it (it may wait for this)
        for cb in callbacks or ():
            try:
                cb(self)
            except Exception:  # noqa: BLE001 - a faulty callback must not break completion
                pass
        return True

    def _resolve(self) -> Any:
        bound = self._decode_self  # read before _decode, which is cleared before it
        decode = self._decode
        if decode is not None:
            try:
                self._value = decode() if bound is None else decode(bound)
            except BaseException as exc:  # noqa: BLE001 - the decoded outcome may be an error
                self._error = exc
            # Cleared once the outcome is in place: a thread that reads the future meanwhile
            # either decodes too (the same outcome) or finds it.
            self._decode = None
            self._decode_self = None
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
            UsageError: the wait could never end (an actor waiting for a call to itself).
            KeyboardInterrupt: the wait was interrupted; the call is cancelled on its actors
                (an async handler gets ``CancelledError``; a sync one runs to its end).
        """
        if self._state is not _DONE:
            if timeout is not None and (timeout < 0 or not math.isfinite(timeout)):
                raise ArgumentError(f"timeout must be a finite number >= 0 or None, got {timeout!r}")
            call = self._call
            if call is not None:
                call.check_wait(True)
            self._asked = True
            if _on_actor_loop():
                warnings.warn(
                    "Future.get() called from within an active event loop blocks it; use 'await' instead "
                    "(this loop runs an actor: its other handlers wait meanwhile)",
                    UserWarning,
                    stacklevel=2,
                )
            try:
                done = self._wait(timeout)
            except KeyboardInterrupt:
                if call is not None and self._state is not _DONE:
                    call.interrupted()
                raise
            if not done:
                with _CB_LOCK:  # atomic with completion: either we saw it done, or nobody will receive it
                    if self._state is not _DONE:
                        self._asked = False
                        if _caller.ON:
                            _caller.timed_out(call)
                        raise FutureTimeoutError(f"result not ready after {timeout} s (the future is still pending)")
        self._asked = True
        return self._resolve()

    result = get

    def _wait(self, timeout: float | None) -> bool:
        """Block until done or ``timeout`` passed; whether done. Reads for the I/O loop if nobody does."""
        loop = _loop
        if loop is not None and not loop.stopped:
            deadline = None if timeout is None else time.monotonic() + timeout
            if loop.try_lead() or not loop.follow():
                if self._lead(loop, deadline):
                    return True
                if deadline is not None:  # time is up, or the loop is stopping: sleep out the rest
                    timeout = max(0.0, deadline - time.monotonic())
            else:
                with _CB_LOCK:
                    waiting = self._state is not _DONE and self._waiter is None
                    if waiting:
                        self._waiter = loop
                        latch = self._sleeper()
                if not waiting:
                    loop.followed()
                else:
                    try:
                        got = latch.acquire(timeout=-1 if timeout is None else timeout)
                    except BaseException:  # interrupted: stop counting as a follower
                        self._unfollow(loop)
                        raise
                    if not got:
                        self._unfollow(loop)
                        return self._state is _DONE
                    latch.release()
                    return True
        with _CB_LOCK:
            if self._state is _DONE:
                return True
            latch = self._sleeper()
        if latch.acquire(timeout=-1 if timeout is None else timeout):
            latch.release()
            return True
        return False

    def _unfollow(self, loop: _Loop) -> None:
        with _CB_LOCK:
            if self._waiter is loop:  # still pending: stop counting as a follower
                self._waiter = None
                loop.followed()

    def _sleeper(self) -> Any:
        """The latch a thread sleeps on until done (made now if none; call holding ``_CB_LOCK``,
        with the future pending): completion releases it, and each sleeper passes it on."""
        latch = self._latch
        if latch is None:
            latch = self._latch = _thread.allocate_lock()
            latch.acquire()
        return latch

    def _lead(self, loop: _Loop, deadline: float | None) -> bool:
        """Read for ``loop`` (this thread holds it) until done or ``deadline``; then give it back."""
        try:
            while self._state is not _DONE:
                if not loop.lead_once(deadline, self._poll):
                    break
        finally:
            loop.leave()
        return self._state is _DONE

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
            UsageError: awaiting could never end (an actor's plain endpoint awaiting a call to
                its own actor, which cannot start before that endpoint returns).
        """
        loop = asyncio.get_running_loop()
        call = self._call
        if call is not None and self._state is not _DONE:
            call.check_wait(False)
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


class CoroutineFuture(Future[R], Coroutine[Any, Any, R]):
    """A :class:`Future` that is also a coroutine object: what tetrarch returns where Monarch's
    method is an ``async def`` (``ProcMesh.logging_option``).

    A Monarch program ``await``s it or passes it to ``asyncio.run`` / ``asyncio.create_task``
    (which take coroutines only); a tetrarch program calls ``.get()``. The operation starts
    when the method is called, not when the coroutine is first run (unlike a native
    coroutine, not running it loses nothing), and it may be run any number of times:
    each run returns the same outcome, as ``get`` does.
    """

    __slots__ = ()

    def send(self, value: Any) -> Any:
        """One step of the coroutine protocol: raises ``StopIteration(result)`` once done
        (or the future's error); before that, gives the running loop an asyncio future
        to wait for, that completes with this one.

        Raises:
            StopIteration: done; its ``value`` is the result.
            RuntimeError: not done and no asyncio loop is running in this thread.
            ActorError, SupervisionError: the operation failed.
        """
        if self._state is _DONE:
            self._asked = True
            raise StopIteration(self._resolve())
        afut = self.as_asyncio()
        afut._asyncio_future_blocking = True  # what `yield from afut` says to the task that drives us
        return afut

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Raise the exception thrown in (a cancelled task throws ``CancelledError``): there
        is nothing to undo, the operation goes on, and ``get`` still gives its outcome.

        Raises:
            BaseException: the one given.
        """
        if isinstance(typ, BaseException):
            exc = typ
        elif isinstance(val, BaseException):
            exc = val
        else:
            exc = typ() if val is None else typ(val)
        raise exc.with_traceback(tb) if tb is not None else exc

    def close(self) -> None:
        """Nothing to release (the coroutine protocol's ``close``)."""


def _on_actor_loop() -> bool:
    """Whether this thread runs an actor's loop now (not a user's loop: a notebook's, ``asyncio.run``'s)."""
    loop = asyncio.events._get_running_loop()
    return loop is not None and loop in _actor_loops
