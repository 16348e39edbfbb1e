"""Mesh calls through per-host relays: one message per host each way instead of one per proc.

A call, broadcast or stream to many actors of one host goes to that host's agent as one
``relay``/``cast`` (:class:`~.._wire.RelayCast` and the call's payload, pickled once), and
the agent sends each of its procs the ``CALL`` (:class:`RelayService`). For a gathered call
(``call``) the replies come back to the agent, which sends the ``OK`` ones on to the caller
as one :data:`~.._wire.BATCH` message once every target answered, identical values once
with the ranks that gave them; an error goes on at once, alone, so the call still fails
as soon as a rank does. ``stream`` and calls whose replies go to a port are relayed one
way only: each actor replies to the caller itself, so per-rank futures keep their
arrival order.

Calls stay in each sender's order whichever way they went: every call is numbered per
receiving process (``Router.send_call``, :mod:`..router._sequencer`). Supervision is the
caller's own: it watches every target proc as for a direct call, so a proc that dies
mid-call fails it within the same bound; the relay drops a dead proc's share and sends
the rest.

Relays are used where they pay (:func:`plan`): a host with at least ``TETRARCH_RELAY_MIN``
targets of the call (measured crossover in docs/performance.md); single-actor calls and
small meshes go straight.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Sequence
from typing import Any

from ..._log import get_logger
from ..router._router import PeerUnreachable, Router
from ..values import _serial, _wire

__all__ = ["RelayPlan", "RelayService", "cast", "plan"]

_log = get_logger("relay")

#: ``(indices sent directly, {relay address: indices it relays})`` for one shape of a mesh.
RelayPlan = tuple[list[int], dict[str, list[int]]]

#: Replies up to this size are compared with the others of their batch (identical ones travel once).
_DEDUP_MAX = 1024


def plan(relays: Sequence[str | None], ranks: Sequence[int], minimum: int, dead: Any = ()) -> RelayPlan | None:
    """Which targets of a call go through which relay; None when none would.

    ``relays``: the relay address of each rank of the whole mesh (None: none known);
    ``ranks``: the call's targets, as ranks of the whole mesh (their index is their tag);
    ``minimum``: fewest targets on one host for its relay to be used (0: never);
    ``dead``: relay addresses known dead (their targets go straight, and fail there).
    """
    if minimum <= 0 or len(ranks) < minimum:
        return None
    by_relay: dict[str, list[int]] = {}
    direct: list[int] = []
    for i, r in enumerate(ranks):
        relay = relays[r]
        if relay is None or relay in dead:
            direct.append(i)
        else:
            by_relay.setdefault(relay, []).append(i)
    groups = {}
    for relay, idx in by_relay.items():
        if len(idx) >= minimum:
            groups[relay] = idx
        else:
            direct.extend(idx)
    if not groups:
        return None
    direct.sort()
    return direct, groups


def cast(rt: Router, relay: str, idx: list[int], targets: Sequence[tuple[str, str]], method: str,
         reply: tuple[str | None, int | None], labels: tuple[str, ...], sizes: tuple[int, ...], gather: bool,
         payload: list, trace: tuple[int, int] | None = None) -> None:
    """Send one call to the targets ``idx`` (indices into ``targets``) through ``relay``; ``trace``: the
    call's trace field (:attr:`~.._wire.CallHeader.trace`), passed on to each target.

    Raises:
        PeerUnreachable: the relay cannot be reached (its host is gone).
    """
    rt.connect(relay)  # first: numbers are taken only for a call that can leave
    next_seq = rt.next_seq
    entries = tuple((targets[i][0], targets[i][1], i, next_seq(targets[i][0])) for i in idx)
    record = _wire.RelayCast(method, reply[0], reply[1], labels, sizes, rt.origin, entries, gather, trace)
    rt.send(relay, [_wire.sys_header(_wire.SVC_RELAY, "cast"), pickle.dumps(tuple(record), 5), *payload])


class _Gather:
    """The replies of one relayed call at its relay, sent on as one batch (the port's handler)."""

    __slots__ = ("svc", "to", "port", "waiting", "ok", "lock")

    def __init__(self, svc: RelayService, to: tuple[str, int], waiting: dict[int, str]) -> None:
        self.svc = svc
        self.to = to  # the caller's address and reply port
        self.port = 0
        self.waiting = waiting  # tag -> target address, until it answered or died
        self.ok: list[tuple[int, list]] = []
        self.lock = threading.Lock()

    def __call__(self, hdr: _wire.PortHeader, payload: list) -> None:
        with self.lock:
            if self.waiting.pop(hdr.tag, None) is None:
                return
            if hdr.status == _wire.OK:
                self.ok.append((hdr.tag, payload))
                payload = []
            done = not self.waiting
        if hdr.status != _wire.OK:  # an error or a death goes on at once: the call fails now
            self.svc.send(self.to[0], [_wire.port_header(self.to[1], hdr.tag, hdr.status), *payload])
        if done:
            self.flush()

    def lost(self, address: str) -> None:
        """The target at ``address`` is gone: stop waiting for it (the caller's own watch fails its share)."""
        with self.lock:
            gone = [t for t, a in self.waiting.items() if a == address]
            for t in gone:
                del self.waiting[t]
            done = bool(gone) and not self.waiting
        if done:
            self.flush()

    def flush(self) -> None:
        self.svc.finished(self)
        if not self.ok:
            return
        groups: dict[Any, tuple[list[int], list]] = {}
        for tag, payload in self.ok:
            first = payload[0] if payload else b""
            key: Any = bytes(first) if len(payload) == 1 and len(first) <= _DEDUP_MAX else object()
            group = groups.get(key)
            if group is None:
                groups[key] = ([tag], payload)
            else:
                group[0].append(tag)
        index = tuple((tuple(tags), len(payload)) for tags, payload in groups.values())
        frames: list[Any] = [_wire.port_header(self.to[1], 0, _wire.BATCH), pickle.dumps(index, 5)]
        for _tags, payload in groups.values():
            frames.extend(payload)
        self.svc.send(self.to[0], frames)


class RelayService:
    """A host agent's ``relay`` service: forwards casts to its procs and gathers their replies."""

    def __init__(self, router: Router) -> None:
        self.rt = router
        self._lock = threading.Lock()
        self._gathers: dict[int, _Gather] = {}  # port -> its gather
        router.add_service(_wire.SVC_RELAY, self.service)
        router.on_peer_lost(lambda address, _err: self.lost(address))

    def service(self, hdr: _wire.SysHeader, payload: list, _conn: Any) -> None:
        """``relay`` messages (I/O thread)."""
        if hdr.op != "cast" or not payload:
            return
        rec = _wire.RelayCast(*pickle.loads(payload[0]))
        body = payload[1:]
        rt = self.rt
        if rec.gather and rec.reply_addr is not None and rec.reply_port is not None:
            gather = _Gather(self, (rec.reply_addr, rec.reply_port), {t[2]: t[0] for t in rec.targets})
            port = gather.port = rt.open_port(gather)
            with self._lock:
                self._gathers[port] = gather
            raddr: str | None = rt.address
            rport: int | None = port
        else:
            raddr, rport = rec.reply_addr, rec.reply_port
        for address, key, rank, seq in rec.targets:
            frames = [_wire.call_header(key, rec.method, raddr, rport, rank, rec.labels, rec.sizes, rec.origin, seq,
                                         rec.trace),
                      *body]
            if rt.on_io_thread() and not rt.connected(address):
                # Dialing waits for the I/O thread: a helper thread dials (the receiver orders by number).
                threading.Thread(target=self._send_call, args=(address, frames, rec, rank), daemon=True,
                                 name="tetrarch-relay-dial").start()
            else:
                self._send_call(address, frames, rec, rank)

    def _send_call(self, address: str, frames: list, rec: _wire.RelayCast, rank: int) -> None:
        try:
            self.rt.send(address, frames)
        except PeerUnreachable as exc:
            why = f"actor rank {rank} cannot be reached from its host's relay: {exc}"
            if rec.reply_addr is not None and rec.reply_port is not None:
                self.send(rec.reply_addr, [_wire.port_header(rec.reply_port, rank, _wire.DEAD), *_serial.dumps(why)])
            if rec.gather:
                self.lost(address)

    def send(self, address: str, frames: list) -> None:
        """Send to a caller, from any thread (a dial, if needed, on a helper thread)."""
        self.rt.send_later(address, frames)

    def finished(self, gather: _Gather) -> None:
        self.rt.close_port(gather.port)
        with self._lock:
            self._gathers.pop(gather.port, None)

    def lost(self, address: str) -> None:
        """A peer's connection dropped: the gathers waiting on it stop waiting."""
        with self._lock:
            gathers = list(self._gathers.values())
        for gather in gathers:
            gather.lost(address)
