"""One live actor in a proc: its thread, its event loop, its mailbox and its fate.

Every actor runs on its own thread with its own asyncio loop (uvloop when installed).
The I/O thread appends messages to the mailbox and wakes the loop once per batch.
Messages are handled one at a time in arrival order (= send order per sender):
a sync endpoint runs inline on the actor's thread (with no asyncio loop visible, so
blocking on other actors' futures is fine); an async endpoint runs as a task and the
mailbox waits for it to finish before the next message (plain async calls queued back to
back run in that one task, each in a context of its own: :mod:`._chained`). ``@concurrent_endpoint``
handlers start in arrival order and the mailbox moves on as soon as one has reached
its first ``await`` (Monarch's rule, except that Monarch may start the next plain message
even before that): the messages behind it, plain ones included, do not wait for it to
finish. So a plain endpoint may release concurrent handlers that wait for it (the gate
pattern). Only ``stop`` waits for them: it cancels the ones still running first.

A call waited for from the actor's own plain handler (or blocking its thread) could never
start: :mod:`._endpoint` refuses that wait with an error instead of hanging. A caller
interrupted while it waits (``KeyboardInterrupt`` in ``Future.get``) cancels its call
(:data:`~._endpoint.CANCEL`): a queued call is answered with an error without running,
a running async handler gets ``CancelledError`` (the actor lives on; a sync one cannot
be interrupted and runs to its end).

Failure rules (Monarch's): an endpoint that raises an ``Exception`` while a caller
waits for its reply answers with the error and the actor lives on. Anything else that
escapes actor code — an exception with no reply to carry it (``broadcast``, an
explicit-port endpoint), a ``BaseException``, ``__init__`` raising, a child failure
its ``__supervise__`` did not handle, ``abort()`` — kills the actor: later messages
get SupervisionError, the meshes it owns are stopped, and a failure record goes to
its owner's supervisor (:mod:`tetrarch._runtime.services._supervision`).

:class:`ActorRunner` is the runtime side of one actor; :class:`~._context.Instance` is
what the actor's own code sees (``context().actor_instance``).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import os
import socket
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from ..._config import STOP_TIMEOUT
from ..._log import get_logger
from ..._telemetry import _trace
from ..plumbing._stop_guard import class_name, running_endpoint
from ..router._router import Router
from ..services._endpoint import CANCEL, CallKey, call_key
from ..services._port import Port
from ..services._supervision import MeshFailure, report_failure
from ..values import _serial, _wire
from ..values._context import Instance, _current, _MessageInfo
from ..values._future import Future, runs_actor_code
from ..values._outcome import error_record
from . import _fate
from ._actor import Actor, endpoints_of
from ._chained import in_context
from ._stall import StallWatch
from ._standby import ActorStandby
from ._stats import EndpointStats, counting
from ._stopping import Once as _Once
from ._stopping import wait_all as _wait_all

__all__ = ["ActorRunner", "Stoppable", "current_actor"]

_log = get_logger("actor")


class Stoppable(Protocol):
    """A mesh an actor owns: it is stopped when the actor stops or dies."""

    def stop(self) -> Future[None]:
        """Stop the mesh."""
        ...


try:  # pragma: no cover - optional speedup
    import uvloop as _uvloop

    _new_loop: Callable[[], asyncio.AbstractEventLoop] = _uvloop.new_event_loop
except ImportError:  # pragma: no cover
    _new_loop = asyncio.new_event_loop

_set_running_loop = asyncio.events._set_running_loop  # hide the loop inside sync endpoints
_HOST = socket.gethostname()


def current_actor() -> ActorRunner | None:
    """The actor whose code is running (None on the client's own threads)."""
    info = _current.get()
    runner = info.instance._runner if info is not None else None
    return runner if isinstance(runner, ActorRunner) else None


class ActorRunner:
    """Runs one actor object. Created by the proc agent on a ``spawn`` request."""

    def __init__(self, router: Router, key: str, instance: Instance, cls: type[Actor], args: tuple,
                 kwargs: dict, on_init: Callable[[BaseException | None], None],
                 owner_address: str | None = None) -> None:
        self.router = router
        self.key = key
        self.instance = instance = dataclasses.replace(instance, _runner=self)
        self.cls = cls
        self.owner_address = owner_address
        self.display = f"{instance.name}{instance.rank}" if len(instance.rank) else instance.name
        self.endpoints = endpoints_of(cls)
        self._concurrent = {name for name, ep in self.endpoints.items() if getattr(ep, "concurrent", False)}
        self.obj: Any = None
        self.failed: str | None = None  # why the actor is dead, once it is
        self._init_traceback = ""  # where __init__ raised, for the calls it rejects
        self.stopped = False
        self.stop_reason = "was stopped"
        self.children: list[Stoppable] = []  # meshes this actor spawned (it owns them)
        self._mailbox: deque = deque()
        self._scheduled = False
        self._busy = False
        self._inflight: dict[asyncio.Task, CallKey] = {}  # running concurrent handlers and their calls
        self._starting: asyncio.Task | None = None  # a concurrent handler yet to reach its first await
        self._running: tuple[CallKey, asyncio.Task] | None = None  # the plain async handler running now
        self._running_method = ""  # its endpoint's name
        # Calls handled and time in handlers, per endpoint, once the admin API looked at this process.
        self.stats: EndpointStats | None = EndpointStats() if counting() else None
        self._cancelled: set[CallKey] = set()  # queued calls their callers cancelled
        self._cancelling: set[CallKey] = set()  # running async handlers cancelled by their callers
        self._loop = _new_loop()
        runs_actor_code(self._loop)
        self._stall = StallWatch(self._loop, self.display, self._plain_running, self._mailbox)
        self._standby: ActorStandby | None = None  # this actor's thread reads for the proc's transport when idle
        self._tid = 0
        self._info = _MessageInfo(instance, instance.rank.rank, tuple(instance.rank.extent.labels),
                                  tuple(instance.rank.extent.sizes))
        self._mailbox.append((self._init, (args, kwargs, on_init)))
        self._scheduled = True
        # Before __init__ runs (it may spawn meshes this actor owns); calls that reached this
        # proc ahead of the spawn queue up behind __init__ first (see _early).
        router.early.publish(key, self)
        self._thread = threading.Thread(target=self._run, name=f"tetrarch-actor-{key}", daemon=True)
        self._thread.start()

    # -- delivery (any thread) ------------------------------------------------
    def deliver(self, hdr: _wire.CallHeader, payload: list) -> None:
        if _trace.ON and len(hdr) > 10:  # only a traced call's header has its 11th field
            hdr = _trace.arrived(hdr)  # its receive span starts now
        if hdr.method == CANCEL:  # the caller gave up on one of its calls (it names the call, see _key)
            try:
                self._loop.call_soon_threadsafe(self._cancel_call, call_key(hdr))
            except RuntimeError:  # the actor is gone: nothing runs
                pass
            return
        self._mailbox.append((self._handle_call, (hdr, payload)))
        if not self._scheduled:
            self._scheduled = True
            try:
                if threading.get_ident() == self._tid:  # read by this actor's own thread (standby)
                    self._loop.call_soon(self._pump)
                else:
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

    def supervise(self, failure: MeshFailure) -> None:
        """Hand a failure of a mesh this actor owns to its ``__supervise__`` (any thread).

        It runs at the actor's next safe point: between messages, or while an async
        handler awaits.
        """
        try:
            self._loop.call_soon_threadsafe(self._supervise, failure)
        except RuntimeError:  # the actor is gone; its own end was reported already
            pass

    # -- actor thread ---------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._tid = threading.get_ident()
        self._loop.call_soon(self._pump)
        self._standby = ActorStandby.attach(self.router.leader_loop, self._loop)
        try:
            self._loop.run_forever()
        finally:
            if self._standby is not None:
                self._standby.end()
            self._loop.close()
            while self._mailbox:  # anything that raced the stop gets an answer
                fn, args = self._mailbox.popleft()
                if fn == self._handle_call:
                    self._reject(args[0])

    def _pump(self) -> None:
        self._scheduled = False
        standby = self._standby
        if standby is None:
            self._drain()
            return
        standby.working(True)
        try:
            self._drain()
        finally:
            self._settle(standby)

    def _settle(self, standby: ActorStandby) -> None:
        """Idle once nothing is queued or running (an async handler that awaits keeps the
        actor busy: the I/O thread reads meanwhile)."""
        if not (self._mailbox or self._busy or self._inflight):
            standby.working(False)

    def _drain(self) -> None:
        mailbox = self._mailbox
        while mailbox and not self._busy and self._starting is None:
            fn, args = mailbox[0]
            if self._inflight and fn == self._stop_now:
                # Everything before the stop has started: cancel the concurrent handlers that
                # still run, and stop once they have ended (before __cleanup__, as Monarch does).
                self.stopped = True
                for task in self._inflight:
                    task.cancel()
                return
            mailbox.popleft()
            coro = fn(*args)
            if coro is None:
                continue
            task = self._loop.create_task(coro)
            if fn != self._handle_call:  # control (stop): nothing else runs meanwhile
                self._busy = True
                task.add_done_callback(self._control_done)
                return
            hdr = args[0]
            if hdr.method in self._concurrent:
                self._inflight[task] = call_key(hdr)
                task.add_done_callback(self._concurrent_done)
                # The next message starts once this handler ran to its first await (its first
                # step schedules the pump: _call_async), not once it finished.
                self._starting = task
                return
            self._busy = True
            self._running = (call_key(hdr), task)
            self._running_method = hdr.method
            task.add_done_callback(self._resume)
            break
        if self._running is not None and mailbox:  # calls in line behind a plain async handler
            self._stall.queued_behind()

    def _plain_running(self) -> tuple[object, str] | None:
        running = self._running  # a tuple of its own per call: calls that share a task differ
        return (running, self._running_method) if running is not None else None

    def _control_done(self, _task: asyncio.Task) -> None:
        self._busy = False
        self._pump()

    def _resume(self, task: asyncio.Task) -> None:
        running = self._running
        if running is None or running[1] is not task:  # resumed already, from the end of _call_async
            return
        self._running = None
        self._busy = False
        if task.cancelled() and running is not None:  # cancelled before its first step
            self._never_started(running[0])
        self._pump()

    def _concurrent_done(self, task: asyncio.Task) -> None:
        key = self._inflight.pop(task, None)
        if self._starting is task:  # cancelled before its first step
            self._starting = None
            self._pump()
        if task.cancelled() and key is not None:
            self._never_started(key)
        if not self._inflight:
            self._pump()

    def _never_started(self, key: CallKey) -> None:
        """Answer a call whose handler was cancelled before it ran a line (so it could not answer)."""
        self._cancelling.discard(key)
        if self.stopped:
            self.router.reply(*key, _wire.DEAD, f"{self.display} was stopped before the call started")
        else:
            self._answer_cancelled(key, "")

    def _answer_cancelled(self, key: CallKey, method: str) -> None:
        exc = asyncio.CancelledError(f"{self.display}.{method or 'call'} was cancelled: its caller was interrupted")
        self.router.reply(*key, _wire.ERR, error_record(exc, self.display, method, skip=0))

    def _cancel_call(self, key: CallKey) -> None:
        """The caller of ``key`` gave up (interrupted): cancel it if it runs, drop it if queued.

        A sync handler cannot be interrupted: by the time this runs, it has ended.
        """
        running = self._running
        if running is not None and running[0] == key:
            self._cancelling.add(key)
            running[1].cancel()
            return
        for task, k in self._inflight.items():
            if k == key:
                self._cancelling.add(key)
                task.cancel()
                return
        # list() copies the deque in one step (the I/O thread may append meanwhile).
        for fn, args in list(self._mailbox):
            if fn == self._handle_call and call_key(args[0]) == key:  # answered now, dropped when its turn comes
                self._cancelled.add(key)
                self._answer_cancelled(key, args[0].method)
                return

    def waits_on_itself(self, blocking: bool) -> str | None:
        """Why a wait, made now on this thread, for a call to this very actor could never end
        (None: it could). ``blocking``: ``Future.get`` (else ``await``)."""
        if threading.get_ident() != self._tid:
            return None
        if blocking:
            return f"it blocks the thread of {self.display}, the actor that must run that call"
        running = self._running
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if running is not None and task is running[1]:
            return (f"{self.display}.{self._running_method} is a plain endpoint: the call cannot start "
                    f"before it returns")
        return None

    def _init(self, args: tuple, kwargs: dict, on_init: Callable[[BaseException | None], None]) -> None:
        token = _current.set(self._info)
        hidden = _set_running_loop(None)
        try:
            self.obj = self.cls(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported to the spawner and the owner
            on_init(exc)
            tb = error_record(exc, self.display, "__init__").traceback.rstrip()
            self._init_traceback = f"\nRemote traceback of {self.display}.__init__:\n{tb}" if tb else ""
            self.fail(f"__init__ raised {type(exc).__name__}: {exc}")
            return
        finally:
            _set_running_loop(self._loop)
            _current.reset(token)
            del hidden
        on_init(None)

    def _prepare(self, hdr: _wire.CallHeader, payload: list) -> tuple[Any, ...] | None:
        """A call's endpoint, handler and arguments: ``(is_async, info, fn, args, kwargs, explicit)``;
        None when the call was answered already (the actor is dead, its caller gave up, its
        arguments cannot be read, no such endpoint)."""
        method, raddr, rport, rank = hdr.method, hdr.reply_addr, hdr.reply_port, hdr.rank
        if self.failed is not None or self.stopped:
            self._reject(hdr)
            return None
        if self._cancelled and call_key(hdr) in self._cancelled:  # its caller gave up, and was answered
            self._cancelled.discard(call_key(hdr))
            payload.clear()
            return None
        try:
            args, kwargs = _serial.loads(payload) if payload else ((), {})
        except Exception as exc:  # noqa: BLE001
            self.router.reply(raddr, rport, rank, _wire.ERR, error_record(exc, self.display, method, skip=0))
            return None
        finally:
            payload.clear()  # the received frames can go now (arrays rebuilt in place keep their own)
        ep = self.endpoints.get(method)
        if ep is None:
            err = AttributeError(f"{self.cls.__name__} has no endpoint {method!r}")
            self.router.reply(raddr, rport, rank, _wire.ERR, error_record(err, self.display, method, skip=0))
            return None
        info = _MessageInfo(self.instance, rank, hdr.labels, hdr.sizes)
        traced = _trace.ON and len(hdr) > 10  # only a traced call's header has its 11th field
        fn = _trace.handler(ep.fn, hdr, ep.is_async, self.instance.name) if traced else ep.fn  # its spans
        explicit = ep.explicit_response_port
        if explicit:
            # The body answers through this port (bound to the caller's reply port, or
            # dropping for a broadcast); its return value is ignored.
            args = (Port(raddr, rport, rank, False, f"{self.display}.{method}"), *args)
        return ep.is_async, info, fn, args, kwargs, explicit

    def _handle_call(self, hdr: _wire.CallHeader, payload: list) -> Coroutine[Any, Any, None] | None:
        prepared = self._prepare(hdr, payload)
        if prepared is None:
            return None
        is_async, info, fn, args, kwargs, explicit = prepared
        method, raddr, rport, rank = hdr.method, hdr.reply_addr, hdr.reply_port, hdr.rank
        if is_async:
            return self._call_async(info, fn, args, kwargs, raddr, rport, rank, method, explicit)
        token = _current.set(info)
        _set_running_loop(None)
        stats = self.stats
        t0 = stats.start(method) if stats is not None else 0.0
        try:
            result = fn(self.obj, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - see _raised
            self._raised(exc, explicit, raddr, rport, rank, method)
            return None
        finally:
            if stats is not None:
                stats.end(method, t0)
            _set_running_loop(self._loop)
            _current.reset(token)
        self._answer(result, explicit, raddr, rport, rank, method)
        return None

    async def _call_async(self, info: _MessageInfo, fn: Callable, args: tuple, kwargs: dict, raddr: str | None,
                          rport: int | None, rank: int, method: str, explicit: bool = False) -> None:
        """One async call; for a plain one, also the plain async calls queued right behind it (see
        ``_chained``), then the next message starts in this step (one loop turn less than
        :meth:`_resume` would take; it then finds nothing to do)."""
        await self._run_async(info, fn, args, kwargs, raddr, rport, rank, method, explicit)
        if method in self._concurrent:
            return
        task = asyncio.current_task()
        assert task is not None  # a coroutine the loop runs as a task (_drain)
        while (job := self._next_chained(task)) is not None:
            await in_context(contextvars.Context(), self._run_async(*job))
        contextvars.Context().run(self._resume, task)  # not in the handler's context

    def _next_chained(self, task: asyncio.Task) -> tuple[Any, ...] | None:
        """Take the next message if it is a plain async call, as the running one of ``task``; its arguments
        for :meth:`_run_async` (None: the next message is something else, or none waits)."""
        mailbox = self._mailbox
        while mailbox:
            fn, args = mailbox[0]
            if fn != self._handle_call:
                return None
            hdr = args[0]
            ep = self.endpoints.get(hdr.method)
            if ep is None or not ep.is_async or hdr.method in self._concurrent:
                return None
            mailbox.popleft()
            prepared = self._prepare(hdr, args[1])
            if prepared is not None:
                self._running = (call_key(hdr), task)
                self._running_method = hdr.method
                _, info, fn, call_args, kwargs, explicit = prepared
                return info, fn, call_args, kwargs, hdr.reply_addr, hdr.reply_port, hdr.rank, hdr.method, explicit
        return None

    async def _run_async(self, info: _MessageInfo, fn: Callable, args: tuple, kwargs: dict, raddr: str | None,
                         rport: int | None, rank: int, method: str, explicit: bool = False) -> None:
        _current.set(info)  # the call runs in its own copy of the context
        key = (raddr, rport, rank)
        plain = method not in self._concurrent
        stats = self.stats
        t0 = stats.start(method, plain) if stats is not None else 0.0
        if self._starting is not None and self._starting is asyncio.current_task():
            self._starting = None
            self._loop.call_soon(self._pump)  # after this first step: the next message may start
        try:
            result = await fn(self.obj, *args, **kwargs)
        except asyncio.CancelledError:
            if self.stopped:  # a concurrent handler cancelled by stop(): not a failure
                self.router.reply(raddr, rport, rank, _wire.DEAD,
                                   f"{self.display} was stopped while {method} was running")
                return
            if key in self._cancelling:  # its caller was interrupted: not a failure either
                self._answer_cancelled(key, method)
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()  # the task may run the next calls (_call_async): none is cancelled
                return
            self._raised(asyncio.CancelledError(f"{method} was cancelled"), explicit, raddr, rport, rank, method)
            return
        except BaseException as exc:  # noqa: BLE001 - see _raised
            self._raised(exc, explicit, raddr, rport, rank, method)
            return
        finally:
            if stats is not None:
                stats.end(method, t0, plain)
            if self._cancelling:
                self._cancelling.discard(key)
        self._answer(result, explicit, raddr, rport, rank, method)

    def _answer(self, result: Any, explicit: bool, raddr: str | None, rport: int | None, rank: int,
                method: str) -> None:
        if self.failed is not None:  # the handler aborted the actor
            self.router.reply(raddr, rport, rank, _wire.DEAD, self.failed)
        elif not explicit:  # with calls waiting, more replies follow: they may go out in one write
            self.router.reply(raddr, rport, rank, _wire.OK, result, (self.display, method), bool(self._mailbox))

    def _raised(self, exc: BaseException, explicit: bool, raddr: str | None, rport: int | None, rank: int,
                method: str) -> None:
        """An endpoint raised: an ``Exception`` with a reply port goes back as ActorError and the
        actor survives; anything else kills it (see the module docstring)."""
        if isinstance(exc, Exception) and not explicit and rport is not None:
            self.router.reply(raddr, rport, rank, _wire.ERR, error_record(exc, self.display, method))
            return
        if rport is None:
            why = "with no caller to receive it"
        elif explicit:
            why = "in an explicit-response-port endpoint"
        else:
            why = "(a BaseException)"
        record = error_record(exc, self.display, method)
        _log.error("%s.%s raised %s; the actor dies:\n%s", self.display, method, why, record.traceback)
        self.fail(f"{method} raised {type(exc).__name__}: {exc} {why}")
        self.router.reply(raddr, rport, rank, _wire.DEAD, self.failed)

    def _reject(self, hdr: _wire.CallHeader) -> None:
        why = self.failed + self._init_traceback if self.failed else f"{self.display} {self.stop_reason}"
        self.router.reply(hdr.reply_addr, hdr.reply_port, hdr.rank, _wire.DEAD, why)

    # -- failure and supervision ------------------------------------------------
    def fail(self, cause: str, causes: tuple[_wire.FailureRecord, ...] = ()) -> None:
        """The actor dies: later messages are rejected, owned meshes stop, the owner hears of it."""
        if self.failed is not None or self.stopped:
            return
        self.failed = f"the actor {self.display} and all its descendants have failed: {cause}"
        rt = self.router
        record = _wire.FailureRecord(self.key, self.instance.name, self.instance.rank.rank, self.display, _HOST,
                                     os.getpid(), cause, causes, class_name(self.cls), running_endpoint(self))
        if self.owner_address:
            report_failure(rt, self.owner_address, record)
        else:
            _log.error("%s (it has no owner to report to)", self.failed)
        self._stop_children()  # not awaited: the owner hears of the failure meanwhile

    def _stop_children(self) -> list[Future[None]]:
        futures = []
        children, self.children = self.children, []
        for mesh in reversed(children):
            try:
                futures.append(type(mesh).stop(mesh))  # not an actor's own "stop" endpoint
            except Exception:  # noqa: BLE001 - the other children still get stopped
                _log.exception("stopping %r owned by %s failed", mesh, self.display)
        return futures

    def _supervise(self, failure: MeshFailure) -> None:
        standby = self._standby
        if standby is None:
            self._supervise_now(failure)
            return
        standby.working(True)  # __supervise__ is actor code: it may run long
        try:
            self._supervise_now(failure)
        finally:
            self._settle(standby)

    def _supervise_now(self, failure: MeshFailure) -> None:
        _fate.supervise(self, failure)

    # -- stop -----------------------------------------------------------------
    def stop(self, on_done: Callable[[], None], reason: str = "was stopped") -> None:
        """Finish the messages already queued, stop owned meshes, run ``__cleanup__``, end the thread.

        ``on_done`` runs once: when all that is over, or when ``__cleanup__`` overran
        ``TETRARCH_CLEANUP_TIMEOUT`` (it is reported and abandoned).
        """
        self.stop_reason = reason
        self.control(self._stop_now, on_done)

    def _stop_now(self, on_done: Callable[[], None]) -> Any:
        self.stopped = True
        once = _Once(on_done)

        async def finish() -> None:
            try:
                children = self._stop_children()
                if children:
                    await asyncio.to_thread(_wait_all, children, STOP_TIMEOUT() + 5)
                await self._cleanup(once)
            finally:
                once()
                self._loop.call_soon(self._loop.stop)  # after this task has finished

        return finish()

    async def _cleanup(self, once: _Once) -> None:
        await _fate.cleanup(self, once)
