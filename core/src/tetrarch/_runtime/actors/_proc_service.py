"""The ``proc`` service: spawns and stops the actors of this process.

Ops (``SYS`` messages): ``spawn`` (payload ``[SpawnMeta, *pickled (cls, args, kwargs)]``),
``stop_actor`` (drain, ``__cleanup__``, then gone), ``stop`` (every actor, then the
process exits so interpreter finalizers run) and ``exit`` (payload: the reason; the
process exits at once, its actors as they are: its owner declared it lost because its
host agent is unreachable, and nothing would report its exit or forward its output).

Stops are bounded by ``TETRARCH_STOP_TIMEOUT`` (:mod:`._stop_guard`). An actor whose stop
has not begun by then (its thread is blocked in ``__init__`` or an endpoint, which Python
cannot interrupt) cannot be stopped: on ``stop_actor`` the process exits at once, saying
why on stderr (its owner receives the line, and the death of the proc ends the stop); on
``stop`` the process goes on to exit after :data:`ACTORS_SHARE` of the bound, leaving it
behind, so that atexit handlers still run in the rest.
"""

from __future__ import annotations

import os
import pickle
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..._config import METRICS, STOP_TIMEOUT
from ..._log import get_logger
from ..._telemetry import _trace
from ..plumbing import _stdio
from ..plumbing._stop_guard import bound_stop
from ..router._router import Router
from ..services._supervision import report_failure
from ..values import _serial, _wire
from ..values._context import Instance
from ..values._outcome import error_record
from ..values._shape import Extent, Point
from ._debug import SESSIONS, install_breakpoint_hook
from ._introspect import process_record, thread_stacks
from ._metrics import start_metrics, track_actor
from ._runner import ActorRunner

__all__ = ["ProcService"]

_log = get_logger("proc")

#: The share of ``TETRARCH_STOP_TIMEOUT`` a proc's ``stop`` gives its actors; the rest is
#: for the interpreter's exit (atexit handlers, non-daemon threads).
ACTORS_SHARE = 0.75


class ProcService:
    """The actors of one process (any process: actors may run in the client too)."""

    def __init__(self, router: Router, on_exit: Callable[[], None] | None, role: str = "client") -> None:
        """``role``: this process's (``client``, ``host`` or ``proc``), as its metrics say it."""
        self.router = router
        self.role = role
        self._on_exit = on_exit
        self.stopping = False
        #: Why the owner told this process to exit at once (``exit``); empty otherwise.
        self.exit_reason = ""
        #: When (``time.monotonic()``) the process's ``stop`` must be over; 0 before one came.
        self.stop_deadline = 0.0
        self.runners: dict[str, ActorRunner] = {}  # actor key -> its runner
        self._owner_watches: dict[str, tuple[str, int]] = {}  # actor key -> its owner's death watch
        self._gone_hooks: list[Callable[[str], None]] = []
        router.add_service(_wire.SVC_PROC, self.service)
        if METRICS():  # OpenTelemetry metrics of this process and its actors (actors/_metrics); a client
            # (or host agent) sets up its exporter while it launches and waits for its host agents (procs)
            start_metrics(role, router.name, lambda: self.runners.values(), background=role != "proc")
        _trace.start_export(role, router.name, background=role != "proc")  # spans through OTLP, if set so

    def service(self, hdr: _wire.SysHeader, payload: list, conn: Any) -> None:
        """``proc`` messages (I/O thread)."""
        op, raddr, rport = hdr.op, hdr.reply_addr, hdr.reply_port
        if op == "spawn":
            self._spawn(payload, raddr, rport)
        elif op == "stop_actor":  # (key, origin, seq): after every call its sender made before, by any path
            key, origin, seq = pickle.loads(payload[0])
            self.router.sequencer.admit(origin, seq, self._stop_actor, key, raddr, rport)
        elif op == "stop":  # (origin, seq) when its sender numbered it: after that sender's calls
            if payload:
                origin, seq = pickle.loads(payload[0])
                self.router.sequencer.admit(origin, seq, self._stop_all, raddr, rport)
            else:
                self._stop_all(raddr, rport)
        elif op == "introspect":  # the admin server asks what runs here (actors/_introspect)
            record = process_record("proc" if self.role == "proc" else "client", self.router.name,
                                    self.router.transport.name, self.runners.values())
            self.router.reply_later(raddr, rport, 0, _wire.OK, record)
        elif op == "debug_wait":  # an actor of a mesh we own paused in breakpoint() (actors/_debug)
            self.router.reply_later(raddr, rport, 0, _wire.OK, SESSIONS.waiting(_serial.loads(payload)))
        elif op == "debug_end":
            SESSIONS.ended(str(_serial.loads(payload)))
        elif op == "stack":  # the Python stack of every thread, the actors' marked (tetrarch stack)
            self.router.reply_later(raddr, rport, 0, _wire.OK, {"pid": os.getpid(),
                                                               "threads": thread_stacks(self.runners.values())})
        elif op == "exit" and self._on_exit is not None and not self.exit_reason:  # procs only
            self.exit_reason = str(_serial.loads(payload)) or "told to exit"
            _log.warning("proc exiting at once: %s", self.exit_reason)
            self._on_exit()

    def _spawn(self, payload: list, raddr: str | None, rport: int | None) -> None:
        if self._on_exit is not None:  # a proc: breakpoint() in its actors pauses them for `tetrarch debug`
            install_breakpoint_hook()
        meta: _wire.SpawnMeta = pickle.loads(payload[0])
        key, name, rank, labels, sizes = meta.key, meta.name, meta.rank, meta.labels, meta.sizes
        owner_address = meta.owner_address
        rt = self.router
        point = Point(rank, Extent(labels, sizes))
        display = f"{name}{point}" if labels else name
        if self.stopping:
            why = f"cannot spawn {display}: its proc is stopping"
            rt.early.refuse(key, why)
            rt.reply(raddr, rport, rank, _wire.DEAD, why)
            return
        try:
            cls, args, kwargs = _serial.loads(payload[1:])
        except Exception as exc:  # noqa: BLE001 - e.g. the class's module is missing here
            hint = ""
            if isinstance(exc, ImportError):
                hint = (" (the actor class's module must be importable in the proc: install it or put it on "
                        "PYTHONPATH; the client's sys.path is appended to the proc's)")
            why = f"spawning {display} failed: {type(exc).__name__}: {exc}{hint}"
            rt.stopped_actors[key] = why
            rt.early.refuse(key, why)
            rt.reply_later(raddr, rport, rank, _wire.DEAD, why)
            if owner_address:
                report_failure(rt, owner_address, _wire.FailureRecord(key, name, rank, display, socket.gethostname(),
                                                                      os.getpid(), why))
            return
        try:
            proc_mesh = pickle.loads(meta.proc_mesh) if meta.proc_mesh else None
        except Exception:  # noqa: BLE001 - only context().actor_instance.proc needs it
            proc_mesh = None
        instance = Instance(name, f"{rt.name}.{display}", cls.__qualname__, point, rt.name, proc_mesh, key)

        def on_init(exc: BaseException | None) -> None:
            if exc is not None:
                rt.stopped_actors[key] = f"{display} failed in __init__: {type(exc).__name__}: {exc}"
            if exc is None:
                rt.reply(raddr, rport, rank, _wire.OK, None)
            else:
                rt.reply(raddr, rport, rank, _wire.ERR, error_record(exc, display, "__init__"))

        self.runners[key] = runner = ActorRunner(rt, key, instance, cls, args, kwargs, on_init, owner_address)
        track_actor(runner)  # its calls stay in the metrics after it stops (when metrics are on)
        if owner_address and owner_address != rt.address:
            # A mesh cannot outlive its owner: if the owner's process dies, stop the actor.
            token = rt.watch(owner_address, lambda why: self._stop_actor(key, None, None,
                                                                         f"stopped because its owner died ({why})"))
            self._owner_watches[key] = (owner_address, token)

    def _stop_actor(self, key: str, raddr: str | None, rport: int | None, why: str = "stopped") -> None:
        rt = self.router
        actor = self.runners.get(key)
        if actor is None:
            rt.reply_later(raddr, rport, 0, _wire.OK, None)
            return

        reason = "was stopped" if why == "stopped" else why
        finished = threading.Event()

        def done() -> None:
            finished.set()
            rt.stopped_actors[key] = f"{actor.display} {reason}"
            self._forget(key)
            self._unwatch_owner(key)
            rt.reply(raddr, rport, actor.instance.rank.rank, _wire.OK, None)

        def stuck(why: str, stack: str) -> None:
            self._cannot_stop(actor, why, stack, done,
                              lambda: rt.reply(raddr, rport, actor.instance.rank.rank, _wire.OK, why))

        actor.stop(done, reason)
        bound_stop(actor, finished, STOP_TIMEOUT(), stuck)

    def _cannot_stop(self, actor: ActorRunner, why: str, stack: str, done: Callable[[], None],
                     refuse: Callable[[], None]) -> None:
        """``actor``'s stop never began: end its process (a proc), or leave it behind (the client).

        A proc answers the stop with ``why`` (``refuse``: the stop's value, which the caller
        reports and waits for the proc's death) and fails its other actors with it, so the
        caller and their owners learn the reason from the proc itself (its queued messages
        leave before it exits), not from a bare report of its death.
        """
        _where(stack)
        if self._on_exit is None:  # actors in the client: the client must not die for one of them
            _log.error("%s; it is left running in this process and counts as stopped", why)
            done()
            return
        if self.exit_reason or self.stopping:
            return  # already exiting, or the proc's own stop goes on without it
        self.exit_reason = why
        _log.error("%s. Its proc exits now so that it cannot keep running (its other actors end with it)", why)
        refuse()
        for other in list(self.runners.values()):
            if other is not actor:
                other.fail(f"its proc exits: {why}")
        _stdio.flush_held(1.0)
        self._on_exit()

    def on_actor_gone(self, hook: Callable[[str], None]) -> None:
        """Call ``hook(actor key)`` once each actor of this process has stopped (its stop's
        thread; must not block). How a layer above (RDMA registrations) releases what an
        actor held without this layer importing it."""
        self._gone_hooks.append(hook)

    def _forget(self, key: str) -> None:
        self.runners.pop(key, None)
        self.router.mailboxes.pop(key, None)
        for hook in list(self._gone_hooks):
            try:
                hook(key)
            except Exception:  # noqa: BLE001 - one faulty hook must not keep an actor's stop from completing
                _log.exception("an actor-gone hook failed for %s", key)

    def _unwatch_owner(self, key: str) -> None:
        watch = self._owner_watches.pop(key, None)
        if watch is not None:
            self.router.unwatch(*watch)

    def _stop_all(self, raddr: str | None, rport: int | None) -> None:
        rt = self.router
        if self.stop_deadline:  # stopping already: the first stop's reply says when it is over
            rt.reply_later(raddr, rport, 0, _wire.OK, None)
            return
        self.stopping = True
        limit = STOP_TIMEOUT()
        self.stop_deadline = time.monotonic() + limit
        actors = list(self.runners.items())
        remaining = [len(actors)]
        lock = threading.Lock()
        over = threading.Event()
        stuck: list[str] = []  # why each actor whose stop never began is left behind

        def finish() -> None:
            with lock:
                if over.is_set():
                    return
                over.set()
            rt.reply(raddr, rport, 0, _wire.OK, None)
            if self._on_exit is not None:
                self._on_exit()

        if not actors:
            threading.Thread(target=finish, daemon=True).start()
            return

        def one_done(key: str, actor: ActorRunner) -> Callable[[], None]:
            def done() -> None:
                rt.stopped_actors[key] = f"{actor.display} was stopped (its proc mesh was stopped)"
                self._forget(key)
                with lock:
                    remaining[0] -= 1
                    last = remaining[0] == len(stuck)
                if last:
                    finish()

            return done

        def left_behind(why: str, stack: str) -> None:
            _where(stack)
            with lock:
                stuck.append(why)
                last = len(stuck) == remaining[0]
            if last:  # every actor still running is stuck: exit without waiting for the share to pass
                _log.error("%s. The proc exits without it", "; ".join(stuck))
                finish()

        for key, actor in actors:
            actor.stop(one_done(key, actor))
            bound_stop(actor, over, limit * ACTORS_SHARE, left_behind, f"{ACTORS_SHARE:g} of TETRARCH_STOP_TIMEOUT")


def _where(stack: str) -> None:
    """Log where the thread of an actor that cannot be stopped is (before the line saying so)."""
    if stack:
        _log.error("%s", stack)
