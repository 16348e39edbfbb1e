"""Questions to services of other processes, each answer awaited within its own bound.

:func:`ask` sends each request (a ``SYS`` message with a reply port of its own) at once and
waits for the answers, each no longer than its bound counted from the sending: a process that
is stopped, or held in a C call that keeps its GIL, costs the asker that bound and no more,
and one that cannot be reached, or has no such service, costs nothing. For on-demand
questions (the admin API, a paused actor asking its owner), not for calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..router._router import PeerUnreachable, Router
from ..values import _serial, _wire

__all__ = ["Answer", "Request", "ask"]


class Request(NamedTuple):
    """``op`` of the service ``service`` at ``address``, with ``frames`` as its payload."""

    address: str
    service: str
    op: str
    frames: tuple[Any, ...] = ()


class Answer(NamedTuple):
    """What came back: ``status`` (an ``_wire`` status; None: no answer in time, or unreachable)."""

    status: int | None
    value: Any
    #: Seconds from the sending to the answer (None: none came).
    seconds: float | None

    @property
    def ok(self) -> bool:
        return self.status == _wire.OK


class _Slot:
    __slots__ = ("t0", "done", "answer")

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.done = threading.Event()
        self.answer = Answer(None, None, None)

    def __call__(self, hdr: _wire.PortHeader, frames: list) -> None:  # the port's handler
        if self.done.is_set():
            return
        try:
            value = _serial.loads(frames)
        except Exception:  # noqa: BLE001 - a malformed answer is no answer
            return
        self.answer = Answer(hdr.status, value, time.monotonic() - self.t0)
        self.done.set()


def ask(rt: Router, requests: Sequence[Request], timeouts: float | Sequence[float]) -> list[Answer]:
    """Send every request now; each one's answer, in order (``timeouts``: one bound, or one per request).

    Never raises for an unreachable process or a missing answer: its :class:`Answer` says so.
    """
    bounds = [timeouts] * len(requests) if isinstance(timeouts, (int, float)) else list(timeouts)
    t0 = time.monotonic()
    slots: list[tuple[_Slot, int]] = []
    try:
        for req in requests:
            slot = _Slot(t0)
            port = rt.open_port(slot)
            slots.append((slot, port))
            try:
                rt.send(req.address, [_wire.sys_header(req.service, req.op, rt.address, port), *req.frames])
            except PeerUnreachable:
                slot.done.set()
        for (slot, _port), bound in zip(slots, bounds, strict=True):
            slot.done.wait(max(0.0, t0 + bound - time.monotonic()))
    finally:
        for _slot, port in slots:
            rt.close_port(port)
    return [slot.answer for slot, _port in slots]
