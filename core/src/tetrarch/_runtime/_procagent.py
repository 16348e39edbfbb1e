"""The ``proc`` service: spawns and stops the actors of this process.

Ops (``SYS`` messages): ``spawn`` (payload ``[SpawnMeta, *pickled (cls, args, kwargs)]``),
``stop_actor`` (drain, ``__cleanup__``, then gone), ``stop`` (every actor, then the
process exits so interpreter finalizers run) and ``exit`` (payload: the reason; the
process exits at once, its actors as they are: its owner declared it lost because its
host agent is unreachable, and nothing would report its exit or forward its output).
"""

from __future__ import annotations

import os
import pickle
import socket
import threading
from collections.abc import Callable
from typing import Any

from .._log import get_logger
from . import _serial, _wire
from ._context import Instance
from ._outcome import error_record
from ._router import Router
from ._runner import ActorRunner
from ._shape import Extent, Point
from ._supervision import report_failure

__all__ = ["ProcAgent"]

_log = get_logger("proc")


class ProcAgent:
    """The actors of one process (any process: actors may run in the client too)."""

    def __init__(self, runtime: Router, on_exit: Callable[[], None] | None) -> None:
        self.runtime = runtime
        self._on_exit = on_exit
        self.stopping = False
        #: Why the owner told this process to exit at once (``exit``); empty otherwise.
        self.exit_reason = ""
        self.runners: dict[str, ActorRunner] = {}  # actor key -> its runner
        self._owner_watches: dict[str, tuple[str, int]] = {}  # actor key -> its owner's death watch
        self._gone_hooks: list[Callable[[str], None]] = []
        runtime.add_service(_wire.SVC_PROC, self.service)

    def service(self, hdr: _wire.SysHeader, payload: list, _conn: Any) -> None:
        """``proc`` messages (I/O thread)."""
        op, raddr, rport = hdr.op, hdr.reply_addr, hdr.reply_port
        if op == "spawn":
            self._spawn(payload, raddr, rport)
        elif op == "stop_actor":
            self._stop_actor(pickle.loads(payload[0]), raddr, rport)
        elif op == "stop":
            self._stop_all(raddr, rport)
        elif op == "exit" and self._on_exit is not None and not self.exit_reason:  # procs only
            self.exit_reason = str(_serial.loads(payload)) or "told to exit"
            _log.warning("proc exiting at once: %s", self.exit_reason)
            self._on_exit()

    def _spawn(self, payload: list, raddr: str | None, rport: int | None) -> None:
        meta: _wire.SpawnMeta = pickle.loads(payload[0])
        key, name, rank, labels, sizes = meta.key, meta.name, meta.rank, meta.labels, meta.sizes
        owner_address = meta.owner_address
        rt = self.runtime
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

        self.runners[key] = ActorRunner(rt, key, instance, cls, args, kwargs, on_init, owner_address)
        if owner_address and owner_address != rt.address:
            # A mesh cannot outlive its owner: if the owner's process dies, stop the actor.
            token = rt.watch(owner_address, lambda why: self._stop_actor(key, None, None,
                                                                         f"stopped because its owner died ({why})"))
            self._owner_watches[key] = (owner_address, token)

    def _stop_actor(self, key: str, raddr: str | None, rport: int | None, why: str = "stopped") -> None:
        rt = self.runtime
        actor = self.runners.get(key)
        if actor is None:
            rt.reply_later(raddr, rport, 0, _wire.OK, None)
            return

        reason = "was stopped" if why == "stopped" else why

        def done() -> None:
            rt.stopped_actors[key] = f"{actor.display} {reason}"
            self._forget(key)
            self._unwatch_owner(key)
            rt.reply(raddr, rport, actor.instance.rank.rank, _wire.OK, None)

        actor.stop(done, reason)

    def on_actor_gone(self, hook: Callable[[str], None]) -> None:
        """Call ``hook(actor key)`` once each actor of this process has stopped (its stop's
        thread; must not block). How a layer above (RDMA registrations) releases what an
        actor held without this layer importing it."""
        self._gone_hooks.append(hook)

    def _forget(self, key: str) -> None:
        self.runners.pop(key, None)
        self.runtime.mailboxes.pop(key, None)
        for hook in list(self._gone_hooks):
            try:
                hook(key)
            except Exception:  # noqa: BLE001 - one faulty hook must not keep an actor's stop from completing
                _log.exception("an actor-gone hook failed for %s", key)

    def _unwatch_owner(self, key: str) -> None:
        watch = self._owner_watches.pop(key, None)
        if watch is not None:
            self.runtime.unwatch(*watch)

    def _stop_all(self, raddr: str | None, rport: int | None) -> None:
        rt = self.runtime
        self.stopping = True
        actors = list(self.runners.items())
        remaining = [len(actors)]
        lock = threading.Lock()

        def finish() -> None:
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
                    last = remaining[0] == 0
                if last:
                    finish()

            return done

        for key, actor in actors:
            actor.stop(one_done(key, actor))
