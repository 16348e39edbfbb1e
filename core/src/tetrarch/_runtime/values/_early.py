"""Calls that reach a proc before the spawn of their actor.

``spawn`` returns its mesh at once (as Monarch's does) and the handle may be passed on
right away: an actor on proc 0 handed the mesh can call its member on proc 1 before the
spawner's own ``spawn`` message has reached proc 1 (they travel on different
connections). Such a call is not an error: the proc holds it until the spawn arrives,
then queues it behind ``__init__``, in arrival order, before any later call, so each
sender's order holds. A call still waiting after :data:`EARLY_HOLD_S` (the spawner died
before its spawn reached this proc, or the key was never spawned) is refused as before
("no actor ..."); a spawn that fails refuses the calls waiting for it with its reason.
At most :data:`MAX_HELD` calls wait per process; beyond that a call is refused at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from . import _wire

__all__ = ["EARLY_HOLD_S", "MAX_HELD", "EarlyCalls"]

#: Seconds a call may wait for its actor's spawn (Monarch's ``actor_spawn_max_idle``).
EARLY_HOLD_S = 30.0
#: Calls waiting for spawns per process at most.
MAX_HELD = 10_000


class _Mailbox(Protocol):
    def deliver(self, hdr: _wire.CallHeader, payload: list) -> None: ...


Reject = Callable[[_wire.CallHeader, str], None]


class EarlyCalls:
    """The calls of one process waiting for their actors' spawns (see the module)."""

    def __init__(self, mailboxes: dict[str, Any], reject: Reject, where: str,
                 hold_s: float = EARLY_HOLD_S, limit: int = MAX_HELD) -> None:
        self._mailboxes = mailboxes
        self._reject = reject
        self._where = where
        self._hold_s = hold_s
        self._limit = limit
        self._lock = threading.Lock()
        self._held: dict[str, list[tuple[_wire.CallHeader, list]]] = {}
        self._timers: dict[str, threading.Timer] = {}
        self._count = 0

    def hold(self, hdr: _wire.CallHeader, payload: list) -> bool:
        """Keep the call until its actor's spawn arrives (or deliver it, if the actor
        appeared meanwhile); False when :data:`MAX_HELD` calls already wait."""
        key = hdr.actor
        with self._lock:
            mailbox = self._mailboxes.get(key)
            if mailbox is None:
                if self._count >= self._limit:
                    return False
                self._count += 1
                self._held.setdefault(key, []).append((hdr, payload))
                if key not in self._timers:
                    timer = threading.Timer(self._hold_s, self._expire, (key,))
                    timer.daemon = True
                    timer.name = "tetrarch-early-calls"
                    self._timers[key] = timer
                    timer.start()
                return True
        mailbox.deliver(hdr, payload)
        return True

    def refusal(self, key: str) -> str:
        """Why a call for ``key`` that cannot wait is refused."""
        text = f"no actor {key!r} in proc {self._where}"
        if self._count >= self._limit:
            text += f" (and {self._count} calls already wait for actors whose spawn has not arrived)"
        return text

    def publish(self, key: str, mailbox: _Mailbox) -> None:
        """Make ``mailbox`` the actor ``key``'s, after handing it the calls that waited for it."""
        with self._lock:
            for hdr, payload in self._take(key):
                mailbox.deliver(hdr, payload)
            self._mailboxes[key] = mailbox

    def refuse(self, key: str, why: str) -> None:
        """The spawn of ``key`` failed: refuse the calls that waited for it with ``why``."""
        with self._lock:
            held = self._take(key)
        for hdr, _payload in held:
            self._reject(hdr, why)

    def close(self) -> None:
        """Stop the timers (the process is closing; nobody is left to answer)."""
        with self._lock:
            timers, self._timers = list(self._timers.values()), {}
            self._held.clear()
            self._count = 0
        for timer in timers:
            timer.cancel()

    def _take(self, key: str) -> list[tuple[_wire.CallHeader, list]]:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        held = self._held.pop(key, [])
        self._count -= len(held)
        return held

    def _expire(self, key: str) -> None:
        with self._lock:
            if self._timers.get(key) is None:
                return  # published or refused meanwhile
            held = self._take(key)
        why = f"no actor {key!r} in proc {self._where}: no spawn of it arrived within {self._hold_s:g} s"
        for hdr, _payload in held:
            self._reject(hdr, why)
