"""Endpoint adverbs: ``call``, ``call_one``, ``choose``, ``stream``, ``broadcast``.

The calling thread pickles the arguments once, writes one message per target actor
and returns a :class:`Future`. Replies are collected on the I/O thread and decoded
lazily by whoever reads the future. Every pending call watches its target procs: if
one dies, the future fails with :class:`SupervisionError` instead of hanging.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._errors import ActorError, RemoteException, SupervisionError
from . import _serial, _wire
from ._future import Future
from ._proc import PeerUnreachable, ProcRuntime
from ._shape import Shape
from ._valuemesh import ValueMesh

if TYPE_CHECKING:
    from ._mesh import ActorMesh

__all__ = ["Endpoint"]

R = TypeVar("R")


def _decode_error(status: int, payload: list, what: str) -> BaseException:
    value = _serial.loads(payload)
    if status == _wire.DEAD:
        return SupervisionError(f"Endpoint call {what} failed: {value}", what)
    try:
        exc, tb, actor, method = value
    except (TypeError, ValueError):
        return RemoteException("Error", repr(value))
    return ActorError(exc, tb, actor or what.rsplit(".", 1)[0], method or what.rsplit(".", 1)[-1])


def group_by_address(targets: list[tuple[str, str]]) -> dict[str, list[int]]:
    """Indices of ``targets`` (``(address, actor key)`` pairs) by process address."""
    by_addr: dict[str, list[int]] = {}
    for i, (addr, _key) in enumerate(targets):
        by_addr.setdefault(addr, []).append(i)
    return by_addr


class _Collector:
    """Gathers the replies of one call on its reply port (I/O thread)."""

    __slots__ = ("rt", "port", "futures", "n", "frames", "count", "shape", "what", "watches", "lock", "single",
                 "stream_next")

    def __init__(self, rt: ProcRuntime, n: int, shape: Shape, what: str, single: bool, stream: bool) -> None:
        self.rt = rt
        self.n = n
        self.shape = shape
        self.what = what
        self.single = single
        self.frames: list[Any] = [None] * n
        self.count = 0
        self.futures = [Future._new() for _ in range(n)] if stream else [Future._new()]
        self.stream_next = 0 if stream else -1
        self.watches: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.port = rt.open_port(self.on_reply)

    def on_reply(self, hdr: tuple, payload: list) -> None:
        _, _port, tag, status = hdr
        with self.lock:
            if self.count >= self.n or self.frames[tag] is not None:
                return
            self.frames[tag] = (status, payload)
            self.count += 1
            done = self.count == self.n
            if self.stream_next >= 0:
                fut = self.futures[self.stream_next]
                self.stream_next += 1
        if self.stream_next >= 0:
            fut._set_lazy(lambda: self._decode_one(status, payload))
        elif status != _wire.OK:
            self.futures[0]._set_lazy(lambda: self._raise(status, payload))
        elif done:
            self.futures[0]._set_lazy(self._decode_all)
        if done:
            self.finish()

    def _raise(self, status: int, payload: list) -> Any:
        raise _decode_error(status, payload, self.what)

    def _decode_one(self, status: int, payload: list) -> Any:
        if status != _wire.OK:
            raise _decode_error(status, payload, self.what)
        return _serial.loads(payload)

    def _decode_all(self) -> Any:
        values = [_serial.loads(p) for _, p in self.frames]
        if self.single:
            return values[0]
        return ValueMesh(self.shape.extent, values)

    def fail(self, tag: int, reason: str) -> None:
        payload = _serial.dumps(reason)
        self.on_reply((_wire.PORT, self.port, tag, _wire.DEAD), payload)

    def watch(self, address: str, tags: list[int]) -> None:
        def dead(reason: str) -> None:
            ranks = self.shape.ranks()
            mesh = self.what.rsplit(".", 1)[0]
            for t in tags:
                self.fail(t, f"actor {mesh} rank {ranks[t]} is gone: {reason}")

        self.watches.append((address, self.rt.watch(address, dead)))

    def watch_targets(self, by_addr: dict[str, list[int]]) -> None:
        """Fail the tags of every process in ``by_addr`` that dies before replying."""
        for address, tags in by_addr.items():
            self.watch(address, tags)

    def finish(self) -> None:
        self.rt.close_port(self.port)
        for address, token in self.watches:
            self.rt.unwatch(address, token)


class Endpoint(Generic[R]):
    """An endpoint of an actor mesh, with the calling adverbs."""

    __slots__ = ("_mesh", "_name")

    def __init__(self, mesh: ActorMesh, name: str) -> None:
        self._mesh = mesh
        self._name = name

    def __repr__(self) -> str:
        return f"<Endpoint {self._mesh._name}.{self._name} over {self._mesh.extent!r}>"

    def _payload(self, args: tuple, kwargs: dict) -> list:
        if not args and not kwargs:
            return []
        return _serial.dumps_checked((args, kwargs), f"call to {self._mesh._name}.{self._name}",
                                     _serial.arg_parts(args, kwargs))

    def _send(self, args: tuple, kwargs: dict, shape: Shape, *, single: bool = False, stream: bool = False,
              reply: bool = True, reply_to: tuple[str, int] | None = None) -> _Collector | None:
        """Send one CALL per actor of ``shape``.

        Replies go to a new :class:`_Collector` (``reply``), to the port ``reply_to``
        (``(address, port id)``, one reply per actor tagged with its index), or nowhere.
        """
        mesh = self._mesh
        mesh._check_usable(shape)
        rt = mesh._runtime()
        payload = self._payload(args, kwargs)
        targets, by_addr = mesh._targets(shape)
        what = f"{mesh._name}.{self._name}"
        labels, sizes = shape.labels, shape.sizes
        coll = _Collector(rt, len(targets), shape, what, single, stream) if reply and reply_to is None else None
        if coll is not None:
            raddr, rport = rt.address, coll.port
            coll.watch_targets(by_addr)
        elif reply_to is not None:
            raddr, rport = reply_to
        else:
            raddr = rport = None
        for i, (addr, key) in enumerate(targets):
            hdr = _wire.header(_wire.CALL, key, self._name, raddr, rport, i, labels, sizes, None)
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
            return Shape(shape.extent.__class__([], []), random.choice(healthy), ())
        point = random.randrange(len(shape))
        return Shape(shape.extent.__class__([], []), shape.rank_of(point), ())

    def _send_to_port(self, args: tuple, kwargs: dict, port: Any, choose: bool) -> None:
        """Cast the call (to every actor, or one random one) with replies going to ``port``.

        ``port`` is a :class:`~tetrarch.Port` or None (no replies: a broadcast).
        """
        shape = self._one_of() if choose else self._mesh._shape
        if port is None or port._port is None:
            self._send(args, kwargs, shape, reply=False)
        else:
            self._send(args, kwargs, shape, reply_to=(port._address, port._port))

    def call(self, *args: Any, **kwargs: Any) -> Future[ValueMesh[R]]:
        """Call every actor of the mesh; the future gives a ``ValueMesh`` of results.

        Raises (from the future): ActorError (first rank that raised),
        SupervisionError (a target died). Raises now: TypeError (unpicklable argument).
        """
        coll = self._send(args, kwargs, self._mesh._shape)
        assert coll is not None
        return coll.futures[0]

    def call_one(self, *args: Any, **kwargs: Any) -> Future[R]:
        """Call the mesh's only actor.

        Raises:
            ValueError: the mesh has more than one actor (slice it first).
        """
        n = len(self._mesh._shape)
        if n != 1:
            raise ValueError(
                f"call_one requires exactly 1 actor, but mesh {self._mesh._name} has {n} "
                f"({self._mesh.extent!r}); slice it, e.g. .slice({self._mesh._shape.labels[0]}=0)"
            )
        coll = self._send(args, kwargs, self._mesh._shape, single=True)
        assert coll is not None
        return coll.futures[0]

    def choose(self, *args: Any, **kwargs: Any) -> Future[R]:
        """Call one actor of the mesh, picked at random (load balancing)."""
        coll = self._send(args, kwargs, self._one_of(), single=True)
        assert coll is not None
        return coll.futures[0]

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Future[R]]:
        """Call every actor; yield one future per reply, in arrival order."""
        coll = self._send(args, kwargs, self._mesh._shape, stream=True)
        assert coll is not None
        return iter(coll.futures)

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Send to every actor without waiting for (or receiving) replies."""
        self._send(args, kwargs, self._mesh._shape, reply=False)
