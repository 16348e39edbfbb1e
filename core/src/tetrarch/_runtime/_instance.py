"""One live actor in a proc: its thread, its event loop and its mailbox.

Every actor runs on its own thread with its own asyncio loop (uvloop when installed).
The I/O thread appends messages to the mailbox and wakes the loop once per batch.
Messages are handled one at a time in arrival order (= send order per sender):
a sync endpoint runs inline on the actor's thread (with no asyncio loop visible, so
blocking on other actors' futures is fine); an async endpoint runs as a task and the
mailbox waits for it to finish before the next message.

An ``@endpoint(explicit_response_port=True)`` gets a :class:`~tetrarch.Port` bound to
the caller's reply port as its first argument and answers through it; its return value
is ignored, and if it raises the actor dies (the caller gets SupervisionError).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import RemoteException
from . import _serial, _wire
from ._actor import endpoints_of
from ._context import Instance, _current, _MessageInfo
from ._port import Port

if TYPE_CHECKING:
    from ._proc import ProcRuntime

__all__ = ["ActorInstance", "error_record"]

try:  # pragma: no cover - optional speedup
    import uvloop as _uvloop

    _new_loop: Callable[[], asyncio.AbstractEventLoop] = _uvloop.new_event_loop
except ImportError:  # pragma: no cover
    _new_loop = asyncio.new_event_loop

_set_running_loop = asyncio.events._set_running_loop  # hide the loop inside sync endpoints


def error_record(exc: BaseException, actor: str, method: str, skip: int = 1) -> tuple:
    """``(exception, remote traceback text, actor, method)``, always picklable."""
    tb = exc.__traceback__
    for _ in range(skip):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    text = "".join(traceback.TracebackException(type(exc), exc, tb).format())
    try:
        _serial.dumps(exc)
        carried: BaseException = exc
    except Exception:  # noqa: BLE001
        carried = RemoteException(type(exc).__qualname__, str(exc))
    return (carried, text, actor, method)


class ActorInstance:
    """Runs one actor object. Created by the proc agent on a ``spawn`` request."""

    def __init__(self, runtime: ProcRuntime, key: str, instance: Instance, cls: type, args: tuple,
                 kwargs: dict, on_init: Callable[[BaseException | None], None]) -> None:
        self.runtime = runtime
        self.key = key
        self.instance = instance
        self.cls = cls
        self.display = f"{instance.name}{instance.rank}" if len(instance.rank) else instance.name
        self.endpoints = endpoints_of(cls)
        self.obj: Any = None
        self.failed: str | None = None  # why the actor is dead, once it is
        self.stopped = False
        self._mailbox: deque = deque()
        self._scheduled = False
        self._busy = False
        self._loop = _new_loop()
        self._info = _MessageInfo(instance, instance.rank.rank, tuple(instance.rank.extent.labels),
                                  tuple(instance.rank.extent.sizes))
        self._mailbox.append((self._init, (args, kwargs, on_init)))
        self._scheduled = True
        self._thread = threading.Thread(target=self._run, name=f"tetrarch-actor-{key}", daemon=True)
        self._thread.start()

    # -- delivery (any thread) ------------------------------------------------
    def deliver(self, hdr: tuple, payload: list) -> None:
        self._mailbox.append((self._handle_call, (hdr, payload)))
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._pump)
            except RuntimeError:  # loop closed: the actor is gone
                self._reject(hdr)

    def control(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the actor's thread after the messages already queued."""
        self._mailbox.append((fn, args))
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._pump)
            except RuntimeError:
                fn(*args)

    # -- actor thread ---------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._pump)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()
            while self._mailbox:  # anything that raced the stop gets an answer
                fn, args = self._mailbox.popleft()
                if fn == self._handle_call:
                    self._reject(args[0])

    def _pump(self) -> None:
        self._scheduled = False
        if self._busy:
            return
        mailbox = self._mailbox
        while mailbox:
            fn, args = mailbox.popleft()
            coro = fn(*args)
            if coro is not None:
                self._busy = True
                task = self._loop.create_task(coro)
                task.add_done_callback(self._resume)
                return

    def _resume(self, _task: asyncio.Task) -> None:
        self._busy = False
        self._pump()

    def _init(self, args: tuple, kwargs: dict, on_init: Callable[[BaseException | None], None]) -> None:
        token = _current.set(self._info)
        hidden = _set_running_loop(None)
        try:
            obj = self.cls.__new__(self.cls)
            obj.__init__(*args, **kwargs)
            self.obj = obj
        except BaseException as exc:  # noqa: BLE001 - reported to the spawner
            self.failed = f"{self.display} failed in __init__: {type(exc).__name__}: {exc}"
            on_init(exc)
            return
        finally:
            _set_running_loop(self._loop)
            _current.reset(token)
            del hidden
        on_init(None)

    def _handle_call(self, hdr: tuple, payload: list) -> Any:
        _, _key, method, raddr, rport, rank, labels, sizes, _sender = hdr
        if self.failed is not None or self.stopped:
            self._reject(hdr)
            return None
        try:
            args, kwargs = _serial.loads(payload) if payload else ((), {})
        except Exception as exc:  # noqa: BLE001
            self.runtime.reply(raddr, rport, rank, _wire.ERR, error_record(exc, self.display, method, skip=0))
            return None
        ep = self.endpoints.get(method)
        if ep is None:
            err = AttributeError(f"{self.cls.__name__} has no endpoint {method!r}")
            self.runtime.reply(raddr, rport, rank, _wire.ERR, error_record(err, self.display, method, skip=0))
            return None
        info = _MessageInfo(self.instance, rank, labels, sizes)
        explicit = ep.explicit_response_port
        if explicit:
            # The body answers through this port (bound to the caller's reply port, or
            # dropping for a broadcast); its return value is ignored.
            args = (Port(raddr, rport, rank, False, f"{self.display}.{method}"), *args)
        if ep.is_async:
            return self._call_async(info, ep.fn, args, kwargs, raddr, rport, rank, method, explicit)
        token = _current.set(info)
        _set_running_loop(None)
        try:
            result = ep.fn(self.obj, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - see _raised
            self._raised(exc, explicit, raddr, rport, rank, method)
            return None
        finally:
            _set_running_loop(self._loop)
            _current.reset(token)
        if not explicit:
            self.runtime.reply(raddr, rport, rank, _wire.OK, result)
        return None

    async def _call_async(self, info: _MessageInfo, fn: Callable, args: tuple, kwargs: dict, raddr: str | None,
                          rport: int | None, rank: int, method: str, explicit: bool = False) -> None:
        _current.set(info)  # the task runs in its own copy of the context
        try:
            result = await fn(self.obj, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - see _raised
            self._raised(exc, explicit, raddr, rport, rank, method)
            return
        if not explicit:
            self.runtime.reply(raddr, rport, rank, _wire.OK, result)

    def _raised(self, exc: BaseException, explicit: bool, raddr: str | None, rport: int | None, rank: int,
                method: str) -> None:
        """An endpoint raised: an ``Exception`` with a reply port goes back as ActorError and the
        actor survives; a ``BaseException``, or any raise from an explicit-port endpoint, kills it."""
        if isinstance(exc, Exception) and not explicit:
            self._failed_call(exc, raddr, rport, rank, method)
        else:
            self._die(exc, raddr, rport, rank, method)

    def _failed_call(self, exc: Exception, raddr: str | None, rport: int | None, rank: int, method: str) -> None:
        record = error_record(exc, self.display, method)
        if rport is None:
            # No one to tell: report where a person will see it.
            print(f"tetrarch: {self.display}.{method} raised with no caller to receive it:\n{record[1]}",
                  file=sys.stderr)
            return
        self.runtime.reply(raddr, rport, rank, _wire.ERR, record)

    def _die(self, exc: BaseException, raddr: str | None, rport: int | None, rank: int, method: str) -> None:
        """Mark the actor dead (later calls are rejected) and tell this call's caller (DEAD)."""
        self.failed = f"{self.display} died in {method}: {type(exc).__name__}: {exc}"
        if raddr is None:
            record = error_record(exc, self.display, method)
            print(f"tetrarch: {self.failed} (no caller to receive it):\n{record[1]}", file=sys.stderr)
        self.runtime.reply(raddr, rport, rank, _wire.DEAD, self.failed)

    def _reject(self, hdr: tuple) -> None:
        why = self.failed or f"{self.display} was stopped"
        self.runtime.reply(hdr[3], hdr[4], hdr[5], _wire.DEAD, why)

    # -- stop -----------------------------------------------------------------
    def stop(self, on_done: Callable[[], None]) -> None:
        """Finish the messages already queued, run ``__cleanup__``, end the thread."""
        self.control(self._stop_now, on_done)

    def _stop_now(self, on_done: Callable[[], None]) -> Any:
        self.stopped = True
        cleanup = getattr(self.obj, "__cleanup__", None) if self.obj is not None else None

        async def finish() -> None:
            try:
                if cleanup is not None:
                    out = cleanup(None)
                    if asyncio.iscoroutine(out):
                        await asyncio.wait_for(out, 10.0)
            except BaseException as exc:  # noqa: BLE001
                print(f"tetrarch: {self.display}.__cleanup__ raised: {exc!r}", file=sys.stderr)
            finally:
                on_done()
                self._loop.stop()

        return finish()
