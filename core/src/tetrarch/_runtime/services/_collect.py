"""Gathering the replies of one operation on a reply port: calls, spawns, stops.

A :class:`ReplyCollector` opens a port on the router, watches the processes it waits for
(a death fails their share at once), and completes futures lazily: replies are decoded
by whoever reads the future, not on the I/O thread.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from ..._telemetry import _caller
from ..router._router import Router
from ..values import _serial, _wire
from ..values._future import Future
from ..values._outcome import decode_error
from ..values._shape import Shape
from ..values._value_mesh import ValueMesh

__all__ = ["Claims", "ReplyCollector", "Targets", "group_by_address"]

#: An actor mesh's targets for one shape: ``(address, actor key)`` per point, point indices
#: by address, and ``(actor key, address)`` per point (as :class:`Claims` take them).
Targets = tuple[list[tuple[str, str]], dict[str, list[int]], list[tuple[str, str]]]


class Claims(Protocol):
    """Where calls on meshes the client owns tell the supervisor which failures the user saw.

    Targets are ``(actor key, process address)`` pairs: one actor each.
    """

    def calls_started(self, targets: Sequence[tuple[str, str]]) -> None:
        """A call (or spawn) to ``targets`` is in flight: hold their failures until it ends."""
        ...

    def calls_ended(self, targets: Sequence[tuple[str, str]], dead: Sequence[tuple[str, str]],
                    received: bool) -> None:
        """It ended; ``dead`` answered that they are gone; ``received``: user code asked for the outcome."""
        ...


def group_by_address(targets: list[tuple[str, str]]) -> dict[str, list[int]]:
    """Indices of ``targets`` (``(address, actor key)`` pairs) by process address."""
    by_addr: dict[str, list[int]] = {}
    for i, (addr, _key) in enumerate(targets):
        by_addr.setdefault(addr, []).append(i)
    return by_addr


#: Guards every collector's reply count (held for a few bytecodes at a time; a lock per
#: collector was one more object per pending call for the garbage collector to walk).
_LOCK = threading.Lock()


class ReplyCollector:
    """Gathers the replies of one call on its reply port (I/O thread); the port's handler is
    the collector itself (:meth:`on_reply`).

    Few objects per call: a pipeline of 20 000 pending calls made the garbage collector walk
    each of them (a quarter of the pipeline's time with 15 objects a call).
    """

    __slots__ = ("rt", "port", "futures", "n", "frames", "count", "shape", "what", "by_addr", "single",
                 "stream_next", "claims", "targets", "deadly", "observed", "obs")

    def __init__(self, rt: Router, n: int, shape: Shape, what: str, single: bool, stream: bool,
                 claims: Claims | None = None, targets: Sequence[tuple[str, str]] = (),
                 deadly: tuple[int, ...] = (_wire.DEAD,)) -> None:
        """``claims`` and ``targets`` (``(actor key, address)`` per tag, as claims take them):
        report the outcome to the client's supervisor; ``deadly``: the reply statuses that
        mean the actor is gone."""
        self.rt = rt
        self.n = n
        self.shape = shape
        self.what = what
        self.single = single
        self.frames: list[Any] = [None] * n
        self.count = 0
        self.futures = [Future._new() for _ in range(n)] if stream else [Future._new()]
        if n == 1:
            self.futures[0]._poll = True  # one reply: its waiter may poll for it (Future._poll)
        self.stream_next = 0 if stream else -1
        #: The tags to fail per process address if that process dies before answering
        #: (:meth:`watch_targets`; the router asks every open port's collector on a death).
        self.by_addr: dict[str, list[int]] | None = None
        self.claims = claims
        self.targets = targets
        self.deadly = deadly
        self.observed = self.futures  # the futures through which user code receives the outcome
        self.obs: _caller.Observation = None  # the call's start and send span (_telemetry._caller), when observed
        if claims is not None:
            claims.calls_started(targets)
        self.port = rt.open_port(self)

    def on_reply(self, hdr: _wire.PortHeader, payload: list) -> None:
        tag, status = hdr.tag, hdr.status
        if status == _wire.BATCH:
            self._on_batch(payload)
            return
        with _LOCK:
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

    __call__ = on_reply  # the port's handler

    def _on_batch(self, payload: list) -> None:
        """The ``OK`` replies of several ranks, gathered by a relay (:mod:`._relay`); each group's
        frames stand for every rank of the group (decoded once per rank: values stay apart)."""
        index = pickle.loads(payload[0])
        at = 1
        for tags, n in index:
            frames = payload[at:at + n]
            at += n
            for tag in tags:
                self.on_reply(_wire.PortHeader(_wire.PORT, self.port, tag, _wire.OK), frames)

    def _raise(self, status: int, payload: list) -> Any:
        raise decode_error(status, payload, self.what)

    def _decode_one(self, status: int, payload: list) -> Any:
        if status != _wire.OK:
            raise decode_error(status, payload, self.what)
        return _serial.loads(payload)

    def _decode_all(self) -> Any:
        values = [_serial.loads(p) for _, p in self.frames]
        if self.single:
            return values[0]
        return ValueMesh(self.shape.extent, values)

    def fail(self, tag: int, reason: str) -> None:
        payload = _serial.dumps(reason)
        self.on_reply(_wire.PortHeader(_wire.PORT, self.port, tag, _wire.DEAD), payload)

    def watch_targets(self, by_addr: dict[str, list[int]]) -> None:
        """Fail the tags of every process in ``by_addr`` that dies before replying.

        Nothing is registered per call: on a death the router asks each open port's handler
        (:meth:`target_died`). A process already known dead fails its tags now.
        """
        self.by_addr = by_addr  # first: a death recorded from now on finds them (Router.mark_dead)
        dead = self.rt.dead_peers
        if dead:
            for address in by_addr:
                why = dead.get(address)
                if why is not None:
                    self.target_died(address, why)

    def target_died(self, address: str, reason: str) -> None:
        """The process at ``address`` died: fail the tags it had not answered (any thread)."""
        tags = self.by_addr.get(address) if self.by_addr is not None else None
        if not tags:
            return
        ranks = self.shape.ranks()
        mesh = self.what.rsplit(".", 1)[0]
        for t in tags:
            self.fail(t, f"actor {mesh} rank {ranks[t]} is gone: {reason}")

    def finish(self) -> None:
        self.rt.close_port(self.port)
        if self.obs is not None:
            _caller.end(self.obs, self.frames, self.what)
        if self.claims is not None:
            dead = [t for t, (status, _) in zip(self.targets, self.frames, strict=True) if status in self.deadly]
            self.claims.calls_ended(self.targets, dead, any(f._asked for f in self.observed))
