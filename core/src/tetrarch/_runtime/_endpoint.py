"""Endpoint adverbs: ``call``, ``call_one``, ``choose``, ``stream``, ``broadcast``.

The calling thread pickles the arguments once, writes one message per target actor
and returns a :class:`Future`. Replies are collected on the I/O thread
(:class:`~._collect.Collector`) and decoded lazily by whoever reads the future. Every
pending call watches its target procs: if one dies, the future fails with
:class:`SupervisionError` instead of hanging.

``Endpoint[P, R]`` is typed from the actor method's signature (``P``: its parameters
after ``self``, ``R``: its return value, awaited for ``async def``), so
``mesh.method.call_one(x).get()`` is known to return ``R``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Generic, NoReturn, ParamSpec, Protocol, TypeVar

from .._errors import ArgumentError, ArgumentTypeError
from . import _serial, _wire
from ._collect import Claims, Collector, Targets
from ._future import Future
from ._router import PeerUnreachable, Router
from ._shape import Extent, Shape
from ._valuemesh import ValueMesh

__all__ = ["Endpoint", "EndpointMesh"]

P = ParamSpec("P")
R = TypeVar("R")


class EndpointMesh(Protocol):
    """What an endpoint needs of its actor mesh (an ``ActorMesh`` or a slice of one)."""

    _name: str
    _shape: Shape

    @property
    def extent(self) -> Extent: ...

    def _runtime(self) -> Router: ...

    def _check_usable(self, shape: Shape, what: str = "") -> None: ...

    def _targets(self, shape: Shape) -> Targets: ...

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
              reply: bool = True, reply_to: tuple[str, int] | None = None) -> Collector | None:
        """Send one CALL per actor of ``shape``.

        Replies go to a new :class:`Collector` (``reply``), to the port ``reply_to``
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
        coll = (Collector(rt, len(targets), shape, what, single, stream, mesh._claims, claimed)
                if reply and reply_to is None else None)
        if coll is not None:
            raddr, rport = rt.address, coll.port
            coll.watch_targets(by_addr)
        elif reply_to is not None:
            raddr, rport = reply_to
        else:
            raddr = rport = None
        for i, (addr, key) in enumerate(targets):
            hdr = _wire.call_header(key, self._name, raddr, rport, i, labels, sizes)
            try:
                rt.send(addr, [hdr, *payload])
            except PeerUnreachable as exc:
                if coll is not None:
                    coll.fail(i, str(exc))
                elif reply_to is not None:
                    rt.reply(raddr, rport, i, _wire.DEAD, f"{what} is unreachable: {exc}")
        return coll

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
