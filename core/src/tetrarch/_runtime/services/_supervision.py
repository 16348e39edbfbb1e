"""Supervision: failures of actor meshes travel to the actor (or client) that owns them.

The spawner of a mesh owns it. Every process keeps a :class:`Supervisor` that knows the
meshes spawned there and by whom. A failure reaches it two ways:

* an actor dies (an exception with nobody to answer, a ``BaseException``, ``__init__``
  raising, an unhandled child failure, ``abort``): its proc sends a ``supervise``
  message to the owner's process;
* a proc dies: the owning process watches every proc its meshes live on, and turns the
  proc's death into one failure per rank there.

The supervisor records the failure on the mesh (so calls on slices that contain the
rank fail fast), then hands a :class:`MeshFailure` to the owner: an actor's
``__supervise__`` (see :mod:`tetrarch._runtime.actors._runner`), or on the client, the
:func:`unhandled_fault_hook`. Each failed rank of a mesh is reported once.

Here "owner" always means the supervising actor (or client) of a mesh; the process that
*started* a proc is its launcher (:mod:`tetrarch._runtime.services._launch`).
"""

from __future__ import annotations

import functools
import os
import queue
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..._events import emit
from ..._log import get_logger
from ..plumbing._stop_guard import class_name
from ..router._router import Router
from ..values import _serial, _wire
from ..values._wire import FailureRecord
from ._client_exit import exit_client, exiting

__all__ = ["MeshFailure", "MeshState", "Supervised", "Supervisor", "default_fault_hook", "report_failure",
           "set_unhandled_fault_hook", "unhandled_fault_hook"]

_log = get_logger("supervision")


class MeshState:
    """State shared by a mesh (actor or proc mesh) and all its slices, in the owner's process."""

    __slots__ = ("failed", "lock", "stopped")

    def __init__(self) -> None:
        self.stopped = False
        self.lock = threading.Lock()
        self.failed: dict[int, MeshFailure] = {}  # underlying rank -> its failure


class Supervised(Protocol):
    """An owner that handles failures itself: an actor (its ``__supervise__``)."""

    def supervise(self, failure: MeshFailure) -> None:
        """Hand ``failure`` to the owner (any thread; must not block)."""
        ...


class MeshFailure:
    """A supervision event: an actor of a mesh (or the proc it ran in) failed.

    Attributes:
        mesh_name: the name the mesh was spawned with.
        mesh: the owned ``ActorMesh`` (in the owner's process; None elsewhere).
        rank: the failed actor's rank in the mesh (``crashed_ranks == [rank]``).
        actor: the failed actor, e.g. ``trainer{'gpus': 1/4}``.
        actor_class: its class, module-qualified, e.g. ``train.Trainer`` ('' when unknown).
        endpoint: what it was running when it failed: an endpoint's name, ``__init__`` or
            ``__supervise__`` ('' when nothing, or unknown: its proc died).
        host, pid: where it ran (empty / 0 when unknown).
        cause: what happened, e.g. ``"proc ... died: killed by SIGKILL"``.
        causes: the earlier failures that led to this one, the root event first.
        received: on the client, True when user code already got this failure as an
            exception: a call it waited on (or ``mesh.initialized``) raised it, or a call
            on the failed rank raised "unhealthy". The default fault hook lets such a
            failure pass (the user has handled it or let it propagate); False elsewhere.

    Picklable (without ``mesh`` and ``received``); ``str(failure)`` names mesh, rank and cause.
    """

    __slots__ = ("mesh_key", "mesh_name", "rank", "actor", "host", "pid", "cause", "causes", "mesh", "received",
                 "actor_class", "endpoint")

    def __init__(self, mesh_key: str, mesh_name: str, rank: int, actor: str, host: str, pid: int, cause: str,
                 causes: tuple[MeshFailure, ...] = (), mesh: Any = None, actor_class: str = "",
                 endpoint: str = "") -> None:
        self.mesh_key = mesh_key
        self.mesh_name = mesh_name
        self.rank = rank
        self.actor = actor
        self.host = host
        self.pid = pid
        self.cause = cause
        self.causes = causes
        self.mesh = mesh
        self.received = False
        self.actor_class = actor_class
        self.endpoint = endpoint

    @classmethod
    def _from_record(cls, record: FailureRecord, mesh: Any = None) -> MeshFailure:
        r = record
        return cls(r.mesh_key, r.mesh_name, r.rank, r.actor, r.host, r.pid, r.cause,
                   tuple(cls._from_record(c) for c in r.causes), mesh, r.actor_class, r.endpoint)

    def _flat(self) -> FailureRecord:
        return FailureRecord(self.mesh_key, self.mesh_name, self.rank, self.actor, self.host, self.pid, self.cause,
                             (), self.actor_class, self.endpoint)

    def _chain(self) -> tuple[FailureRecord, ...]:
        """Records (without causes) of the causes and of this failure, the root event first."""
        return (*(c._flat() for c in self.causes), self._flat())

    @property
    def crashed_ranks(self) -> list[int]:
        return [self.rank]

    @property
    def root_event(self) -> MeshFailure:
        """The first failure of the chain (this one when it has no causes)."""
        return self.causes[0] if self.causes else self

    def _where(self) -> str:
        if self.pid:
            return f" (pid {self.pid}{' on ' + self.host if self.host else ''})"
        return ""

    def _qualified(self) -> str:
        """The actor as Monarch names it: ``<module.Class name{'gpus': 1/4}>`` (class first, when known)."""
        return f"<{self.actor_class} {self.actor}>" if self.actor_class else f"<{self.actor}>"

    def _event(self) -> str:
        """One event: the actor (its class, name and rank), where it ran, the endpoint it ran, then the cause."""
        running = ""
        if self.endpoint:
            running = f" in {self.endpoint}" if self.endpoint.startswith("__") else f" in endpoint {self.endpoint!r}"
        return f"actor {self._qualified()}{self._where()} failed{running}: {self.cause}"

    def report(self) -> str:
        """A readable multi-line report, the root event first.

        Each event names, in Monarch's order, the actor's class and name
        (``<module.Class name{'gpus': 1/4}>``), then the endpoint it was running (when
        one was), then what happened::

            MeshFailure on mesh 'trainers', rank 1:
              root event: actor <train.Trainer trainers{'gpus': 1/4}> (pid 123 on host) failed in endpoint
              'step': step raised ValueError: bad batch with no caller to receive it
        """
        lines = [f"MeshFailure on mesh {self.mesh_name!r}, rank {self.rank}:"]
        events = (*self.causes, self)
        for i, ev in enumerate(events):
            lines.append(f"  {'root event' if i == 0 else 'then'}: {ev._event()}")
        return "\n".join(lines)

    def __str__(self) -> str:
        endpoint = f", endpoint={self.endpoint}" if self.endpoint else ""
        return (f"MeshFailure(mesh={self.mesh_name!r}, crashed_ranks=[{self.rank}], actor={self._qualified()}"
                f"{self._where()}{endpoint}, cause={self.cause})")

    __repr__ = __str__

    def __reduce__(self) -> tuple:
        return (MeshFailure, (self.mesh_key, self.mesh_name, self.rank, self.actor, self.host, self.pid, self.cause,
                              self.causes, None, self.actor_class, self.endpoint))


def report_failure(router: Router, owner_address: str, record: FailureRecord) -> None:
    """Send a failure record to the supervisor of the process at ``owner_address`` (any thread)."""
    router.send_later(owner_address, [_wire.sys_header(_wire.SVC_SUPERVISE, "failure"), *_serial.dumps(record)])


#: The one line that says why the client ends and how to keep it running.
ENDING = ("tetrarch: ending the program with exit code 1: no code handled this failure (to handle failures, catch "
          "the SupervisionError of a call you wait on, give the owning actor a __supervise__, or set "
          "tetrarch.unhandled_fault_hook)")


def default_fault_hook(failure: MeshFailure) -> None:
    """Print ``failure.report()`` to stderr and end the client with exit code 1.

    The client ends as if its main thread raised ``SystemExit(1)``: ``finally`` blocks
    and atexit handlers run, and the procs it started are stopped. A failure the user
    already received (``failure.received``: a call they waited on raised it) passes:
    it was handled where it was raised. Once the client is ending, later failures are
    printed in one line each.
    """
    if failure.received:
        _log.debug("failure received by the caller, not ending the client: %s", failure)
        return
    if exiting():
        _log.error("also failed: %s", failure)
        return
    _log.error("unhandled failure reached the client (pid %d on %s)\n%s%s\n%s", os.getpid(), socket.gethostname(),
               failure.report(), _init_traceback(failure), ENDING)
    exit_client(1)


def _init_traceback(failure: MeshFailure) -> str:
    """The remote traceback of a failed ``__init__`` (from ``mesh.initialized``), indented; else ''."""
    initialized = getattr(failure.mesh, "initialized", None)
    if initialized is None or not failure.cause.startswith("__init__ raised"):
        return ""
    # Its reply was sent before the failure report: normally there already. Waited on without
    # get(), which would count as the user receiving the failures of its other ranks.
    arrived = threading.Event()
    initialized.add_done_callback(lambda _f: arrived.set())
    arrived.wait(2.0)
    text = getattr(initialized._error, "remote_traceback", "")
    return "\n" + "".join("    " + line for line in text.splitlines(True)).rstrip() if text else ""


unhandled_fault_hook: Callable[[MeshFailure], None] = default_fault_hook

#: Seconds the default fault hook waits for user code to receive a failure (a call it just made
#: raises it) before it ends the program.
_RECEIPT_GRACE_S = 1.0


def set_unhandled_fault_hook(hook: Callable[[MeshFailure], None]) -> None:
    """Make ``hook`` the client's ``tetrarch.unhandled_fault_hook``, as a program's own assignment would."""
    pkg = sys.modules.get("tetrarch")
    if pkg is not None:
        pkg.unhandled_fault_hook = hook  # type: ignore[attr-defined]
    else:  # pragma: no cover - the kernel is always imported through its package
        global unhandled_fault_hook
        unhandled_fault_hook = hook


def _current_hook() -> Callable[[MeshFailure], None]:
    """The hook in force: ``tetrarch.unhandled_fault_hook`` as the user left it."""
    pkg = sys.modules.get("tetrarch")
    hook = getattr(pkg, "__dict__", {}).get("unhandled_fault_hook") if pkg is not None else None
    return hook if hook is not None else unhandled_fault_hook


# -- the per-process supervisor --------------------------------------------------
class _Owned:
    """A mesh spawned in this process, as its supervisor tracks it."""

    __slots__ = ("key", "name", "mesh", "state", "owner", "proc_state", "ranks", "watches", "reported")

    def __init__(self, key: str, name: str, mesh: Any, state: MeshState, owner: Supervised | None,
                 proc_state: MeshState | None, ranks: list[tuple[str, int, str, str, int]]) -> None:
        self.key = key
        self.name = name
        self.mesh = mesh
        self.state = state
        self.owner = owner
        self.proc_state = proc_state
        self.ranks = ranks  # per rank: (address, rank, actor display, host, pid)
        self.watches: list[tuple[str, int]] = []
        self.reported: set[int] = set()


def _brief(r: FailureRecord) -> dict[str, Any]:
    return {"actor": r.actor, "mesh": r.mesh_name, "rank": r.rank, "cause": r.cause}


def _failure_event(r: FailureRecord) -> None:
    """The ``actor.failed`` lifecycle event, marked as its cascade's root cause or naming that root."""
    emit("actor.failed", mesh=r.mesh_name, key=r.mesh_key, rank=r.rank, actor=r.actor, endpoint=r.endpoint,
         host=r.host, actor_pid=r.pid, cause=r.cause, root_cause=not r.causes,
         root=_brief(r.causes[0] if r.causes else r), chain=[_brief(c) for c in r.causes],
         **{"class": r.actor_class})


class Supervisor:
    """Failures of the meshes spawned in this process, and their delivery to owners."""

    def __init__(self, router: Router, role: str) -> None:
        self.router = router
        self.role = role
        self._lock = threading.Lock()
        self._owned: dict[str, _Owned] = {}
        self._hooks: queue.SimpleQueue[MeshFailure] | None = None
        self.quiet = False  # set while the client shuts down: stops are not failures
        # The client's claims, per actor ``(mesh key, address)``: calls in flight to it, its
        # failures held until they end, and the actors whose failure user code received.
        self._inflight: dict[tuple[str, str], int] = {}
        self._held: dict[tuple[str, str], list[MeshFailure]] = {}
        self._received: set[tuple[str, str]] = set()
        self._receipts = threading.Condition(self._lock)  # notified when user code receives a failure
        router.add_service(_wire.SVC_SUPERVISE, self.service)

    # -- registration -----------------------------------------------------------
    def adopt(self, key: str, name: str, mesh: Any, state: MeshState, owner: Supervised | None,
              proc_state: MeshState | None, ranks: list[tuple[str, int, str, str, int]]) -> None:
        """Track the actor mesh ``key`` (owned by ``owner``, None = this process's root) and watch its procs.

        ``mesh`` is what a :class:`MeshFailure` carries as ``.mesh``; ``state`` records its
        failed ranks; ``proc_state`` is the state of the proc mesh it lives on; ``ranks``
        says per rank ``(address, rank, actor display, host, pid)``.
        """
        owned = _Owned(key, name, mesh, state, owner, proc_state, ranks)
        with self._lock:
            self._owned[key] = owned
        cls = getattr(mesh, "_cls", None)
        emit("mesh.spawned", mesh=name, key=key, actors=len(ranks),
             owner=getattr(owner, "display", None) or self.role,
             **{"class": class_name(cls) if isinstance(cls, type) else ""})
        by_addr: dict[str, list[int]] = {}
        for addr, rank, *_ in ranks:
            by_addr.setdefault(addr, []).append(rank)
        for addr, rs in by_addr.items():
            if addr == self.router.address:
                continue  # actors in this process fail through their own reports

            def died(reason: str, rs: list[int] = rs) -> None:
                for r in rs:
                    self._proc_died(owned, r, reason)

            owned.watches.append((addr, self.router.watch(addr, died)))

    def owned(self) -> list[tuple[str, str, Any, MeshState, MeshState | None, list[tuple[str, int, str, str, int]]]]:
        """The meshes spawned here and tracked now: ``(key, name, mesh, state, proc state, ranks)`` each."""
        with self._lock:
            return [(o.key, o.name, o.mesh, o.state, o.proc_state, list(o.ranks)) for o in self._owned.values()]

    def release(self, key: str) -> None:
        """Stop tracking a mesh (it was stopped): later events about it are ignored."""
        with self._lock:
            owned = self._owned.pop(key, None)
            self._received = {t for t in self._received if t[0] != key}
        if owned is not None:
            emit("mesh.stopped", mesh=owned.name, key=key)
            for addr, token in owned.watches:
                self.router.unwatch(addr, token)

    def release_proc_mesh(self, state: MeshState) -> None:
        """Forget every mesh spawned on the proc mesh whose shared state is ``state`` (it stopped)."""
        with self._lock:
            keys = [k for k, o in self._owned.items() if o.proc_state is state]
        for key in keys:
            self.release(key)

    # -- events -------------------------------------------------------------------
    def _proc_died(self, owned: _Owned, rank: int, reason: str) -> None:
        _addr, _rank, actor, host, pid = owned.ranks[rank]
        cls = getattr(owned.mesh, "_cls", None)
        self.failure(FailureRecord(owned.key, owned.name, rank, actor, host, pid, reason, (),
                                   class_name(cls) if isinstance(cls, type) else ""))

    def service(self, hdr: _wire.SysHeader, payload: list, _conn: Any) -> None:
        """``supervise``/``failure`` messages from the procs of meshes spawned here (I/O thread)."""
        if hdr.op == "failure":
            self.failure(_serial.loads(payload))

    def failure(self, record: FailureRecord) -> None:
        """Record a failure and deliver it to the mesh's owner (once per rank)."""
        key, rank = record.mesh_key, record.rank
        with self._lock:
            owned = self._owned.get(key)
            if owned is None or rank in owned.reported:
                return
            state = owned.state
            if state.stopped or (owned.proc_state is not None and owned.proc_state.stopped):
                return  # being stopped: not a failure
            owned.reported.add(rank)
        failure = MeshFailure._from_record(record, owned.mesh)
        state.failed[rank] = failure
        _failure_event(record)
        if owned.owner is not None:
            owned.owner.supervise(failure)
        elif self.role == "client":
            self._offer(failure, (key, owned.ranks[rank][0]))
        else:
            _log.error("a mesh spawned outside any actor failed and has no owner to tell:\n%s", failure.report())

    # -- the client: failures the user received from calls -----------------------------
    # A failure of a mesh the client owns is held while a call (or the spawn) to the
    # failed actor is in flight. When that call ends, its failure is marked received if
    # user code asked for the call's outcome (a thread waits in get(), a task awaits it,
    # or it was read already): the exception it gets is the failure. The hook then runs.
    def calls_started(self, targets: Sequence[tuple[str, str]]) -> None:
        """A call to the actors ``targets`` (``(mesh key, address)``) is in flight (any thread)."""
        with self._lock:
            for t in targets:
                self._inflight[t] = self._inflight.get(t, 0) + 1

    def calls_ended(self, targets: Sequence[tuple[str, str]], dead: Sequence[tuple[str, str]],
                    received: bool) -> None:
        """That call ended: ``dead`` answered that they are gone; ``received``: the user asked for the
        outcome. Also called with no ``targets`` when a call raised "unhealthy" for ``dead``."""
        released: list[MeshFailure] = []
        with self._lock:
            for t in targets:
                n = self._inflight.get(t, 0) - 1
                if n > 0:
                    self._inflight[t] = n
                else:
                    self._inflight.pop(t, None)
            if received and dead:
                self._received.update(dead)
                self._receipts.notify_all()
            if self._held:
                for t in (*targets, *dead):
                    if t not in self._inflight:
                        released += self._held.pop(t, ())
        for failure in released:
            self._to_client_hook(failure)

    def _offer(self, failure: MeshFailure, target: tuple[str, str]) -> None:
        with self._lock:
            if target in self._inflight:
                self._held.setdefault(target, []).append(failure)
                return
        self._to_client_hook(failure)

    def _to_client_hook(self, failure: MeshFailure) -> None:
        if self.quiet:
            return
        with self._lock:
            if self._hooks is None:
                self._hooks = queue.SimpleQueue()
                threading.Thread(target=self._hook_loop, name="tetrarch-fault-hook", daemon=True).start()
        self._hooks.put(failure)

    def _has_received(self, target: tuple[str, str]) -> bool:
        return target in self._received

    def _hook_loop(self) -> None:
        assert self._hooks is not None
        while True:
            failure = self._hooks.get()
            if self.quiet:
                continue
            hook = _current_hook()
            with self._lock:
                addr = self._owned[failure.mesh_key].ranks[failure.rank][0] if failure.mesh_key in self._owned else ""
                target = (failure.mesh_key, addr)
                # A call user code makes right after the failure arrived (spawn, then call at once)
                # raises it there: the default hook gives that call a moment before ending the program.
                failure.received = target in self._received or (
                    hook is default_fault_hook
                    and self._receipts.wait_for(functools.partial(self._has_received, target),
                                                _RECEIPT_GRACE_S))
            try:
                hook(failure)
            except BaseException as exc:  # noqa: BLE001 - a raising hook ends the client
                _log.error("unhandled failure on the client (pid %d on %s); the fault hook %r raised %r\n%s",
                           os.getpid(), socket.gethostname(), getattr(hook, "__qualname__", hook), exc,
                           failure.report())
                exit_client(1)

