"""Endpoint adverbs: ``call``, ``call_one``, ``choose``, ``stream``, ``broadcast``.

The calling thread pickles the arguments once, writes one message per target actor
and returns a :class:`Future`. Replies are collected on the I/O thread
(:class:`~._collect.ReplyCollector`) and decoded lazily by whoever reads the future. Every
pending call watches its target procs: if one dies, the future fails with
:class:`SupervisionError` instead of hanging.

``Endpoint[P, R]`` is typed from the actor method's signature (``P``: its parameters
after ``self``, ``R``: its return value, awaited for ``async def``), so
``mesh.method.call_one(x).get()`` is known to return ``R``.

Each future of a call knows its call (:class:`_Call`): a wait that could never end (an
actor waiting for a call to itself from a plain handler, or blocking its own thread on
one) raises ``UsageError``; a caller interrupted in ``get`` sends :data:`CANCEL` to the
targets, and the next call to an actor still busy with an abandoned call says so once.
"""

from __future__ import annotations

import random
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Generic, NoReturn, ParamSpec, Protocol, TypeVar

from ..._config import RELAY_MIN
from ..._errors import ArgumentError, ArgumentTypeError, UsageError
from ..._log import get_logger
from ..._telemetry import _caller
from ..router._router import PeerUnreachable, Router
from ..values import _serial, _wire
from ..values._context import _current
from ..values._future import Future
from ..values._shape import Extent, Shape
from ..values._value_mesh import ValueMesh
from ._collect import Claims, ReplyCollector, Targets
from ._relay import RelayPlan
from ._relay import cast as relay_cast

__all__ = ["CANCEL", "CallKey", "Endpoint", "EndpointMesh", "call_key"]

P = ParamSpec("P")
R = TypeVar("R")

#: The method name of a ``CALL`` that cancels the call its reply address, reply port and
#: rank name (:func:`call_key`; sent when that call's caller is interrupted; the actor's
#: runner handles it).
CANCEL = "__tetrarch_cancel__"
#: A call, as its caller names it: (reply address, reply port, rank).
CallKey = tuple[str | None, int | None, int]


def call_key(hdr: _wire.CallHeader) -> CallKey:
    """How ``CANCEL`` names the call ``hdr`` (and how a runner finds it)."""
    return (hdr.reply_addr, hdr.reply_port, hdr.rank)
#: How long an abandoned async call may take to end (its cancellation) before a new call
#: that waits behind it is reported.
_CANCEL_GRACE_S = 1.0

_log = get_logger("actor")


class _SelfWait(Protocol):
    """The running actor, as a call to itself sees it (``ActorRunner``)."""

    def waits_on_itself(self, blocking: bool) -> str | None: ...


class _Call:
    """One endpoint call, as its futures see it (``Future._call``)."""

    __slots__ = ("_rt", "_what", "_targets", "_raddr", "_rport", "_cls", "_name", "_me", "_future", "_noted",
                 "_interrupted")

    def __init__(self, rt: Router, what: str, targets: list[tuple[str, str]], raddr: str, rport: int, cls: Any,
                 name: str, me: _SelfWait | None) -> None:
        self._rt, self._what, self._targets, self._raddr, self._rport = rt, what, targets, raddr, rport
        self._cls, self._name = cls, name
        self._me = me  # the calling actor, when it is one of the targets
        self._future: weakref.ref[Future[Any]] | None = None
        self._noted = False  # a later call was reported waiting behind this abandoned one
        self._interrupted = False

    def check_wait(self, blocking: bool) -> None:
        """Raise if the caller waits for this call where it could never end.

        Raises:
            UsageError: the caller is one of the call's actors and waits where that actor
                cannot run the call (its own thread, or its running plain handler).
        """
        why = self._me.waits_on_itself(blocking) if self._me is not None else None
        if why:
            raise UsageError(
                f"waiting for {self._what} here would never end: {why}. Call the method directly "
                f"(self.{self._name}(...)) instead of through the mesh, or wait for the call from a "
                f"@concurrent_endpoint with 'await' (it does not hold the actor)")

    def is_sync(self) -> bool:
        """Whether the called endpoint is a plain ``def`` (it cannot be cancelled)."""
        prop = getattr(self._cls, self._name, None) if self._cls is not None else None
        return getattr(prop, "is_async", True) is False

    def pending(self) -> bool:
        fut = self._future() if self._future is not None else None
        return fut is not None and not fut.done()

    def interrupted(self) -> None:
        """The waiting caller was interrupted: ask every target to cancel the call."""
        for i, (addr, key) in enumerate(self._targets):
            try:
                self._rt.send_call(addr, key, CANCEL, self._raddr, self._rport, i, (), (), [])  # after the call
            except Exception:  # noqa: BLE001 - a target that is gone runs nothing
                pass
        if self._interrupted:
            return
        self._interrupted = True
        if self.is_sync():
            _log.warning("%s was interrupted, but it is a sync endpoint: it cannot be cancelled and runs to its "
                         "end; the actor handles no other call meanwhile (make it 'async def' to be able to "
                         "interrupt it)", self._what)
        with _abandoned_lock:
            for target in self._targets:
                _abandoned[target] = self
        fut = self._future() if self._future is not None else None
        if fut is not None:
            fut.add_done_callback(lambda _f: self._forget())

    def _forget(self) -> None:
        with _abandoned_lock:
            for target in self._targets:
                if _abandoned.get(target) is self:
                    del _abandoned[target]

    def note_waiter(self, what: str) -> None:
        """A new call, ``what``, went to an actor still running this abandoned call: say so once."""
        if self._noted:
            return
        self._noted = True
        if self.is_sync():
            self._report(what)
            return
        timer = threading.Timer(_CANCEL_GRACE_S, self._report, (what,))  # its cancellation may still end it
        timer.daemon = True
        timer.start()

    def _report(self, what: str) -> None:
        if self.pending():
            _log.warning("%s waits: its actor is still running %s, whose caller was interrupted (%s)", what,
                         self._what, "a sync endpoint cannot be cancelled" if self.is_sync()
                         else "it did not end when cancelled")


#: Calls whose caller was interrupted while they were pending, by target ``(address, actor key)``.
_abandoned: dict[tuple[str, str], _Call] = {}
_abandoned_lock = threading.Lock()


def _waiting_behind(what: str, targets: list[tuple[str, str]]) -> None:
    with _abandoned_lock:
        found = {id(c): c for c in (_abandoned.get(t) for t in targets) if c is not None}
    for call in found.values():
        call.note_waiter(what)


def _caller_among(targets: list[tuple[str, str]]) -> _SelfWait | None:
    """The actor that runs this code, if it is one of ``targets``."""
    info = _current.get()
    runner = info.instance._runner if info is not None else None
    me = (getattr(getattr(runner, "router", None), "address", None), getattr(runner, "key", None))
    if me[1] is None or not hasattr(runner, "waits_on_itself"):
        return None
    return runner if me in targets else None  # type: ignore[return-value]


class EndpointMesh(Protocol):
    """What an endpoint needs of its actor mesh (an ``ActorMesh`` or a slice of one)."""

    _name: str
    _shape: Shape

    @property
    def extent(self) -> Extent: ...

    def _runtime(self) -> Router: ...

    def _check_usable(self, shape: Shape, what: str = "") -> None: ...

    def _targets(self, shape: Shape) -> Targets: ...

    def _relay_plan(self, shape: Shape, minimum: int) -> RelayPlan | None: ...

    def _healthy_ranks(self) -> list[int] | None: ...

    @property
    def _claims(self) -> Claims | None: ...


class Endpoint(Generic[P, R]):
    """An endpoint of an actor mesh, with the calling adverbs."""

    __slots__ = ("_mesh", "_name")

    def __init__(self, mesh: EndpointMesh, name: str) -> None:
        self._mesh = mesh
        self._name = name

    def __repr__(self) -> str:
        return f"<Endpoint {self._mesh._name}.{self._name} over {self._mesh.extent!r}>"

    if not TYPE_CHECKING:  # at run time only: type checkers keep reporting ``mesh.method()`` as an error

        def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
            """Not a way to call: an endpoint of a mesh is called through an adverb.

            Raises:
                TypeError: always; the message names the adverbs.
            """
            name = f"{self._mesh._name}.{self._name}"
            raise ArgumentTypeError(
                f"an endpoint of an actor mesh is not called directly: use {name}.call(...) (every actor, a future "
                f"of a ValueMesh), {name}.call_one(...) (a mesh of one actor), {name}.choose(...) (one actor "
                f"picked for you), {name}.stream(...) (one future per reply) or {name}.broadcast(...) (no reply); "
                f"then .get() the future"
            )

    def _payload(self, args: tuple, kwargs: dict) -> list:
        if not args and not kwargs:
            return []
        return _serial.dumps_checked((args, kwargs), f"call to {self._mesh._name}.{self._name}",
                                     _serial.arg_parts(args, kwargs))

    def _send(self, args: tuple, kwargs: dict, shape: Shape, *, single: bool = False, stream: bool = False,
              reply: bool = True, reply_to: tuple[str, int] | None = None) -> ReplyCollector | None:
        """Send one CALL per actor of ``shape``.

        Replies go to a new :class:`ReplyCollector` (``reply``), to the port ``reply_to``
        (``(address, port id)``, one reply per actor tagged with its index), or nowhere.
        """
        mesh = self._mesh
        mesh._check_usable(shape, f"{mesh._name}.{self._name}")
        rt = mesh._runtime()
        payload = self._payload(args, kwargs)
        targets, by_addr, claimed = mesh._targets(shape)
        what = f"{mesh._name}.{self._name}"
        labels, sizes = shape.labels, shape.sizes
        raddr: str | None
        rport: int | None
        obs = _caller.begin(what, payload, len(targets)) if _caller.ON else None  # metrics, the send span
        coll = (ReplyCollector(rt, len(targets), shape, what, single, stream, mesh._claims, claimed)
                if reply and reply_to is None else None)
        if obs is not None and coll is not None:
            coll.obs = obs  # before sending: the last reply ends it
        trace = _caller.trace_field(obs) if obs is not None else None
        if _abandoned:
            _waiting_behind(what, targets)
        if coll is not None:
            raddr, rport = rt.address, coll.port
            coll.watch_targets(by_addr)
            call = _Call(rt, what, targets, raddr, rport, getattr(mesh, "_cls", None), self._name,
                         _caller_among(targets))
            for fut in coll.futures:
                fut._call = call
            call._future = weakref.ref(coll.futures[-1])  # the last to complete
        elif reply_to is not None:
            raddr, rport = reply_to
        else:
            raddr = rport = None
        plan = mesh._relay_plan(shape, RELAY_MIN()) if len(targets) > 1 else None
        name = self._name
        for i in range(len(targets)) if plan is None else plan[0]:
            addr, key = targets[i]
            try:
                rt.send_call(addr, key, name, raddr, rport, i, labels, sizes, payload, trace)
            except PeerUnreachable as exc:
                self._unreachable(rt, coll, (raddr, rport) if reply_to is not None else None, [i], what, exc)
        if plan is not None:  # one message per host through its relay; gathered replies for call()
            gather = coll is not None and not stream and not single
            for relay, idx in plan[1].items():
                try:
                    relay_cast(rt, relay, idx, targets, name, (raddr, rport), labels, sizes, gather, payload, trace)
                except PeerUnreachable as exc:
                    self._unreachable(rt, coll, (raddr, rport) if reply_to is not None else None, idx, what, exc)
        if obs is not None and coll is None:
            _caller.end(obs, None, what)  # no outcome to wait for: the call is over once sent
        return coll

    @staticmethod
    def _unreachable(rt: Router, coll: ReplyCollector | None, port: tuple[Any, Any] | None, tags: list[int],
                     what: str, exc: Exception) -> None:
        for i in tags:
            if coll is not None:
                coll.fail(i, str(exc))
            elif port is not None:
                rt.reply(port[0], port[1], i, _wire.DEAD, f"{what} is unreachable: {exc}")

    def _one_of(self) -> Shape:
        """A one-point shape: a uniformly random actor of the mesh."""
        mesh = self._mesh
        shape = mesh._shape
        healthy = mesh._healthy_ranks()
        if healthy:  # some ranks failed: choose among the others
            return Shape(Extent([], []), random.choice(healthy), ())
        point = random.randrange(len(shape))
        return Shape(Extent([], []), shape.rank_of(point), ())

    def _send_to_port(self, args: tuple, kwargs: dict, port: Any, choose: bool) -> None:
        """Cast the call (to every actor, or one random one) with replies going to ``port``.

        ``port`` is a :class:`~tetrarch.Port` or None (no replies: a broadcast).
        """
        shape = self._one_of() if choose else self._mesh._shape
        if port is None or port._port is None:
            self._send(args, kwargs, shape, reply=False)
        else:
            self._send(args, kwargs, shape, reply_to=(port._address, port._port))

    def call(self, *args: P.args, **kwargs: P.kwargs) -> Future[ValueMesh[R]]:
        """Call every actor of the mesh; the future gives a ``ValueMesh`` of results.

        Raises (from the future): ActorError (first rank that raised),
        SupervisionError (a target died). Raises now: TypeError (unpicklable argument).
        """
        coll = self._send(args, kwargs, self._mesh._shape)
        assert coll is not None
        return coll.futures[0]

    def call_one(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Call the mesh's only actor.

        Raises:
            ValueError: the mesh has more than one actor (slice it first).
        """
        n = len(self._mesh._shape)
        if n != 1:
            raise ArgumentError(
                f"call_one requires exactly 1 actor, but mesh {self._mesh._name} has {n} "
                f"({self._mesh.extent!r}); slice it, e.g. .slice({self._mesh._shape.labels[0]}=0)"
            )
        coll = self._send(args, kwargs, self._mesh._shape, single=True)
        assert coll is not None
        return coll.futures[0]

    def choose(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Call one actor of the mesh, picked at random (load balancing)."""
        coll = self._send(args, kwargs, self._one_of(), single=True)
        assert coll is not None
        return coll.futures[0]

    def stream(self, *args: P.args, **kwargs: P.kwargs) -> Iterator[Future[R]]:
        """Call every actor; yield one future per reply, in arrival order."""
        coll = self._send(args, kwargs, self._mesh._shape, stream=True)
        assert coll is not None
        return iter(coll.futures)

    def broadcast(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Send to every actor without waiting for (or receiving) replies."""
        self._send(args, kwargs, self._mesh._shape, reply=False)
