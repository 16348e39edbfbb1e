"""``ActorMesh``: one actor per proc of a proc mesh, addressed as a whole or sliced."""

from __future__ import annotations

import functools
import pickle
import threading
from collections.abc import Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

from ..._config import STOP_TIMEOUT
from ..._errors import (
    ArgumentError,
    EndpointNotFoundError,
    NotOwnerError,
    SupervisionError,
)
from ..._log import get_logger
from ..actors._actor import endpoints_of
from ..process._root import get_root
from ..router._router import PeerUnreachable, Router
from ..services._collect import Claims, ReplyCollector, Targets, group_by_address
from ..services._endpoint import Endpoint
from ..services._relay import RelayPlan
from ..services._relay import plan as relay_plan
from ..services._supervision import MeshState
from ..values import _wire
from ..values._future import Future
from ..values._shape import MeshTrait, Shape

__all__ = ["ActorMesh"]

#: The actor class of an ``ActorMesh[T]`` annotation.
T = TypeVar("T")

_log = get_logger("supervision")
#: Seconds past ``TETRARCH_STOP_TIMEOUT`` (and its procs' own bound) after which an actor
#: mesh's stop kills the procs that did not answer it.
_BACKSTOP_GRACE_S = 5.0

_RESERVED = {"stop", "slice", "initialized", "extent", "sizes", "size", "split", "rename", "flatten"}


class _ProcMeshState(Protocol):
    """What an actor mesh needs of the proc mesh it lives on (a ``ProcMesh``)."""

    _name: str
    _state: MeshState


class ActorMesh(MeshTrait, Generic[T]):
    """Actors of one class spawned on every proc of a proc mesh.

    Each ``@endpoint`` of the class is an attribute with the adverbs ``call``,
    ``call_one``, ``choose``, ``stream`` and ``broadcast``. Generic in the actor class,
    as Monarch's: ``ActorMesh[Trainer]`` annotates a mesh of ``Trainer`` actors
    (``ProcMesh.spawn`` is typed as returning the class itself, for the endpoints' types).
    """

    def __init__(self, name: str, cls: type, shape: Shape, ids: list[tuple[str, str]], *,
                 initialized: Future[None] | None = None, owned: bool = True, state: MeshState | None = None,
                 proc_mesh: _ProcMeshState | None = None, claims: Claims | None = None,
                 relays: list[str | None] | None = None) -> None:
        """``relays``: the host agent of each rank's proc, through which mesh calls may be
        relayed (:mod:`..services._relay`); None: calls go straight to every actor."""
        self._name = name
        self._cls = cls
        self._shape = shape
        self._ids = ids
        self._owned = owned
        self._state = state or MeshState()
        self._initialized = initialized
        self._proc_mesh = proc_mesh
        self._claims = claims  # the client's supervisor, for meshes the client owns (see Supervisor.claim)
        self._endpoints = endpoints_of(cls)
        self._target_cache: dict[Shape, Targets] = {}
        self._relays = relays
        self._plan_cache: dict[tuple[Shape, int], RelayPlan | None] = {}
        if "stop" in self._endpoints:  # Monarch's actors may have one (a loop's off switch): it shadows stop()
            self.stop = Endpoint(self, "stop")  # type: ignore[method-assign, assignment]
        clash = _RESERVED.intersection(self._endpoints) - {"stop"}
        if clash:
            raise ArgumentError(f"{cls.__qualname__} has endpoints named {sorted(clash)}, which clash with ActorMesh "
                             f"attributes; rename them")

    # -- mesh trait -----------------------------------------------------------
    def _new_with_shape(self, shape: Shape) -> ActorMesh:
        return ActorMesh(self._name, self._cls, shape, self._ids, initialized=self._initialized, owned=False,
                         state=self._state, proc_mesh=self._proc_mesh, claims=self._claims, relays=self._relays)

    def _targets(self, shape: Shape) -> Targets:
        """``(address, actor key)`` per point of ``shape``, point indices by address, and
        ``(actor key, address)`` per point (as supervision's claims take them); cached."""
        cache = self._target_cache
        hit = cache.get(shape)
        if hit is None:
            targets = [self._ids[r] for r in shape.ranks()]
            hit = cache[shape] = (targets, group_by_address(targets), [(key, addr) for addr, key in targets])
            if len(cache) > 64:
                cache.pop(next(iter(cache)))
        return hit

    def _relay_plan(self, shape: Shape, minimum: int) -> RelayPlan | None:
        """Which targets of ``shape`` go through which host's relay (None: all straight); cached."""
        relays = self._relays
        if relays is None or minimum <= 0 or len(shape) < minimum:
            return None
        dead = self._runtime().dead_peers
        key = (shape, minimum)
        cache = self._plan_cache
        if key in cache:
            hit = cache[key]
            if hit is None or not any(r in dead for r in hit[1]):
                return hit
        hit = cache[key] = relay_plan(relays, shape.ranks(), minimum, dead)
        if len(cache) > 64:
            cache.pop(next(iter(cache)))
        return hit

    @staticmethod
    def _runtime() -> Router:
        return get_root().router

    def _check_usable(self, shape: Shape, what: str = "") -> None:
        """Raises SupervisionError if the mesh was stopped or ``shape`` holds a failed rank."""
        state = self._state
        if state.stopped:
            raise SupervisionError(f"actor mesh {self._name!r} was stopped; spawn a new one to keep calling")
        pm = self._proc_mesh
        if pm is not None and pm._state.stopped:
            raise SupervisionError(f"actor mesh {self._name!r} was stopped with its ProcMesh {pm._name!r}; "
                                   f"spawn a new one to keep calling")
        if state.failed:
            failed = state.failed
            for r in shape.ranks():
                failure = failed.get(r)
                if failure is not None:
                    if self._claims is not None:  # raised to the user: a failure they have seen
                        addr, key = self._ids[r]
                        self._claims.calls_ended([], [(key, addr)], True)
                    root = failure.root_event
                    first = f"; root event: {root.actor}: {root.cause}" if root is not failure else ""
                    # As the call would have failed had it been sent before the failure was known:
                    # "Endpoint call m.f failed: ...", with a failed __init__'s remote traceback.
                    raise SupervisionError(
                        (f"Endpoint call {what} failed: " if what else "")
                        + f"actor mesh {self._name!r} is unhealthy: rank {r} failed ({failure.actor}: "
                        f"{failure.cause}{first}); call a slice without it, or spawn a new mesh"
                        + self._init_traceback(failure.actor, failure.cause))

    def _init_traceback(self, actor: str, cause: str) -> str:
        """The remote traceback of a failed ``__init__``, when its reply is here already; else ''."""
        init = self._initialized
        if init is None or not cause.startswith("__init__ raised") or not init.done():
            return ""
        text = getattr(init._error, "remote_traceback", "")
        return f"\nRemote traceback of {actor}.__init__:\n{text.rstrip()}" if text else ""

    def _healthy_ranks(self) -> list[int] | None:
        """Underlying ranks of this (sliced) mesh that have not failed; None if none failed."""
        if not self._state.failed:
            return None
        return [r for r in self._shape.ranks() if r not in self._state.failed]

    # -- endpoints ------------------------------------------------------------
    def __getattr__(self, name: str) -> Endpoint[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._endpoints:
            return Endpoint(self, name)
        if hasattr(self._cls, name):
            raise EndpointNotFoundError(
                f"{self._cls.__qualname__}.{name} is not an endpoint: decorate it with @endpoint to call it on a "
                f"mesh (endpoints: {sorted(self._endpoints) or 'none'})"
            )
        import difflib  # here: only a misspelt endpoint needs it

        close = difflib.get_close_matches(name, self._endpoints, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise EndpointNotFoundError(f"{self._cls.__qualname__} has no endpoint {name!r} (endpoints: "
                                    f"{sorted(self._endpoints) or 'none'}){hint}")

    @property
    def initialized(self) -> Future[None]:
        """Completes once every actor's ``__init__`` ran (raises ActorError if one raised)."""
        return self._initialized if self._initialized is not None else Future._completed(None)

    def __await__(self) -> Generator[Any, None, ActorMesh[T]]:
        """``await procs.spawn(...)`` (Monarch's older style): waits for ``initialized``, gives the mesh.

        Raises:
            ActorError: an actor's ``__init__`` raised.
        """
        yield from self.initialized.__await__()
        return self

    # -- stop -----------------------------------------------------------------
    def stop(self) -> Future[None]:
        """Stop the actors: pending messages are handled first, then ``__cleanup__`` runs.

        Calls made afterwards raise SupervisionError saying the mesh was stopped.
        Stopping twice is a no-op. Bounded by ``TETRARCH_STOP_TIMEOUT``: an actor whose
        stop has not begun by then (its thread is blocked in ``__init__`` or an endpoint,
        which Python cannot interrupt) cannot be stopped, so its proc exits, taking the
        proc's other actors with it (their owners get the failure), and the reason is
        logged here; ``__cleanup__`` is abandoned after ``TETRARCH_CLEANUP_TIMEOUT``.
        The future completes (with None) once every actor stopped or its proc ended.

        An actor class with an endpoint named ``stop`` (Monarch allows it) shadows this
        method on its meshes, as in Monarch: ``mesh.stop`` is the endpoint;
        ``ActorMesh.stop(mesh)`` (or stopping the proc mesh) stops the mesh.

        Raises:
            ValueError: this is a slice or a reference (only the owner may stop).
        """
        if not self._owned:
            raise NotOwnerError(f"actor mesh {self._name!r} is a slice or reference; only its owner (the full mesh "
                             f"returned by spawn) can stop it")
        with self._state.lock:
            if self._state.stopped:
                return Future._completed(None)
            self._state.stopped = True
        rt = self._runtime()
        targets, by_addr, _ = self._targets(self._shape)
        coll = ReplyCollector(rt, len(targets), self._shape, f"{self._name}.stop", False, False)
        coll.watch_targets(by_addr)
        for i, (addr, key) in enumerate(targets):
            try:
                stamp = rt.stamp(addr)  # numbered after the calls before it, which may have gone through a relay
                rt.send(addr, [_wire.sys_header(_wire.SVC_PROC, "stop_actor", rt.address, coll.port),
                               pickle.dumps((key, *stamp))])
            except PeerUnreachable:
                coll.fail(i, "proc unreachable")
        fut: Future[None] = Future._new()
        key = targets[0][1] if targets else ""
        known_failed = bool(self._state.failed)

        def finish() -> None:
            get_root().supervisor.release(key)
            fut._set_result(None)

        def done(f: Future[Any]) -> None:
            ending: list[str] = []  # procs that answered that they end (an actor they could not stop)
            try:
                answers = f.get().values()
            except Exception as exc:  # noqa: BLE001 - a dead proc counts as stopped
                if not known_failed:  # a proc that ended during the stop: say why
                    _log.warning("stopping actor mesh %r: %s", self._name, exc)
            else:
                for (addr, _key), why in zip(targets, answers, strict=True):
                    if why:
                        _log.warning("stopping actor mesh %r: %s; its proc exits", self._name, why)
                        ending.append(addr)
            _when_dead(rt, ending, _BACKSTOP_GRACE_S, finish)

        coll.futures[0].add_done_callback(done)
        _backstop(coll.futures[0], self._name, self._proc_mesh, [a for a, _ in targets])
        return fut

    def __repr__(self) -> str:
        return f"<ActorMesh {self._name} of {self._cls.__qualname__} {self.extent!r}>"

    def __reduce__(self):
        return (_rebuild, (self._name, self._cls, self._shape, self._ids, self._relays))


def _when_dead(rt: Router, addresses: list[str], timeout: float, then: Callable[[], None]) -> None:
    """Call ``then()`` once every process of ``addresses`` is known dead, or after ``timeout`` s."""
    pending = set(addresses)
    lock = threading.Lock()
    called: list[bool] = []
    watches: list[tuple[str, int]] = []

    def once() -> None:
        with lock:
            if called:
                return
            called.append(True)
            tokens = list(watches)
        timer.cancel()
        for address, token in tokens:
            rt.unwatch(address, token)
        then()

    def dead(address: str) -> None:
        with lock:
            pending.discard(address)
            left = len(pending)
        if not left:
            once()

    timer = threading.Timer(timeout, once)
    timer.daemon = True
    if not pending:
        once()
        return
    timer.start()
    for address in set(addresses):
        token = rt.watch(address, functools.partial(_ignore_reason, dead, address))
        with lock:
            watches.append((address, token))


def _ignore_reason(fn: Callable[[str], None], address: str, _why: str) -> None:
    fn(address)


def _backstop(stopped: Future[Any], name: str, proc_mesh: _ProcMeshState | None, addresses: list[str]) -> None:
    """Kill the procs of ``addresses`` if ``stopped`` is not done ``TETRARCH_STOP_TIMEOUT`` + a grace from now.

    A proc ends an actor it cannot stop itself (:mod:`._stop_guard`); this is for a proc
    that could not even do that (a C call holding the GIL). The kill's death reports
    complete the stop.
    """
    limit = STOP_TIMEOUT()

    def watch() -> None:
        try:
            stopped.get(limit + _BACKSTOP_GRACE_S)
            return
        except TimeoutError:
            pass
        except Exception:  # noqa: BLE001 - over, failed or not
            return
        why = (f"actor mesh {name!r} was not stopped {limit + _BACKSTOP_GRACE_S:g} s after its stop "
               f"(TETRARCH_STOP_TIMEOUT={limit:g}) and its procs did not end it")
        kill = getattr(proc_mesh, "_kill_at", None)
        _log.warning("%s: %s", why, "killing them" if kill is not None else "giving up on it")
        if kill is not None:
            kill(set(addresses), why)

    threading.Thread(target=watch, name=f"tetrarch-stop-backstop-{name}", daemon=True).start()


def _rebuild(name: str, cls: type, shape: Shape, ids: list[tuple[str, str]],
             relays: list[str | None] | None = None) -> ActorMesh:
    return ActorMesh(name, cls, shape, ids, owned=False, relays=relays)
