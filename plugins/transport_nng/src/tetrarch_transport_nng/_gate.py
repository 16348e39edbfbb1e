"""The stage before ``on_open``, held to the kernel's bounds on strangers (:class:`~tetrarch.plugins.PreAuthLimits`).

Whoever reaches a listener's address can complete nng's 8-byte SP header exchange and
then send nothing: nng keeps such a pipe on the listener's ``rep0`` socket for good, and
the kernel never hears of it (it hears of a connection at ``on_open``, after the
rendezvous and the token). A :class:`Gate` (one per transport) bounds that stage:

* each would-be connection holds one :class:`Ticket` from the moment its ``rep0`` pipe
  is added until it opens (its token matched on its own ``pair0`` socket) or goes; the
  ticket passes from the ``rep0`` pipe to the ``pair0`` socket handed out for it, so one
  deadline covers the whole opening;
* a ticket older than ``limits.timeout`` is closed (its closer runs on the I/O thread);
* at most ``limits.max_pending`` tickets wait at once, and waiting tickets plus open
  connections stay within ``limits.connection_limit()``: a new arrival closes the
  *oldest* waiting one, so strangers can't lock real peers out by arriving first;
* when open connections alone fill ``connection_limit()``, a new arrival is refused
  (its pipe closed at once) with a log line at most every :data:`_LOG_EVERY` seconds.

What each waiting connection may make nng buffer is bounded where the sockets are made
(``_nng.py``: the ``rep0`` socket's ``recv_max_size`` is one rendezvous request; an unclaimed
``pair0`` socket queues one message of at most ``CHUNK`` bytes besides the one its pipe reads).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from tetrarch.plugins import PreAuthLimits

if TYPE_CHECKING:
    from tetrarch.plugins import Connection, IoLoop

__all__ = ["Gate", "Ticket"]

_log = logging.getLogger("tetrarch.transport.nng")

#: Seconds between two log lines about refused or closed strangers (the count in between is reported).
_LOG_EVERY = 10.0


class Ticket:
    """One would-be connection waiting for its opening: what closes it, and when it must be open."""

    __slots__ = ("closer", "deadline", "peer")

    def __init__(self, closer: Callable[[], None], deadline: float, peer: str) -> None:
        #: Closes whatever the connection holds now (called once, on the I/O thread); swapped
        #: when the ticket passes from the ``rep0`` pipe to the connection's ``pair0`` socket.
        self.closer = closer
        self.deadline = deadline
        self.peer = peer


class _Throttled:
    """A warning logged at most every :data:`_LOG_EVERY` seconds, with the count since the last one."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._count = 0
        self._last = -_LOG_EVERY

    def note(self, n: int, detail: str) -> None:
        """Count ``n`` more events (caller holds the gate's lock); log when the interval has passed."""
        self._count += n
        now = time.monotonic()
        if now - self._last >= _LOG_EVERY:
            _log.warning("%s: %s (%d since the last such line)", self._what, detail, self._count)
            self._last, self._count = now, 0


class Gate:
    """Waiting tickets (oldest first) and open connections of one transport (thread-safe).

    Args:
        loop: returns the transport's I/O loop (where closers and the deadline timer run).
    """

    def __init__(self, loop: Callable[[], IoLoop]) -> None:
        self.limits = PreAuthLimits()
        self._loop = loop
        self._lock = threading.Lock()
        self._waiting: OrderedDict[Ticket, None] = OrderedDict()
        self._open: set[Connection] = set()
        self._armed = False  # a deadline timer is scheduled on the loop
        self._refused = _Throttled("nng: connections refused at the connection limit")
        self._shed = _Throttled("nng: connections closed before they opened")

    @property
    def waiting(self) -> int:
        """How many tickets wait now."""
        return len(self._waiting)

    @property
    def open_count(self) -> int:
        """How many connections count as open now."""
        return len(self._open)

    def admit(self, closer: Callable[[], None], peer: str) -> Ticket | None:
        """A ticket for a new arrival, or None when open connections fill the limit (refuse it).

        Admitting may close the oldest waiting tickets (their closers run on the I/O thread).
        Never raises.
        """
        limits = self.limits
        limit = limits.connection_limit()
        with self._lock:
            if len(self._open) >= limit:
                self._refused.note(1, f"{len(self._open)} connections are open (limit {limit}); refused {peer}")
                return None
            ticket = Ticket(closer, time.monotonic() + limits.timeout, peer)
            self._waiting[ticket] = None
            room = min(limits.max_pending, limit - len(self._open))
            shed = [self._waiting.popitem(last=False)[0] for _ in range(len(self._waiting) - room)]
            if shed:
                self._shed.note(len(shed), f"{room} wait for their opening; closing the oldest, {shed[0].peer}")
            arm = not self._armed
            self._armed = True
        if arm:
            self._loop().call(self._arm)
        for old in shed:
            self._close(old)
        return ticket

    def holds(self, ticket: Ticket) -> bool:
        """Whether ``ticket`` still waits (neither opened, nor gone, nor closed by the gate)."""
        with self._lock:
            return ticket in self._waiting

    def hand_over(self, ticket: Ticket, closer: Callable[[], None]) -> bool:
        """Give ``ticket`` a new closer (same place in line, same deadline) if it still waits; whether it did."""
        with self._lock:
            if ticket not in self._waiting:
                return False
            ticket.closer = closer
            return True

    def leave(self, ticket: Ticket | None) -> bool:
        """``ticket``'s connection opened or went away: it no longer waits. Whether it waited."""
        if ticket is None:
            return False
        with self._lock:
            return self._waiting.pop(ticket, 1) is None

    def opened(self, conn: Connection) -> None:
        """Count ``conn`` as open (until :meth:`released`)."""
        with self._lock:
            self._open.add(conn)

    def released(self, conn: Connection) -> None:
        """``conn`` is closed: it no longer counts (idempotent)."""
        with self._lock:
            self._open.discard(conn)

    def reset(self) -> None:
        """Forget every ticket and connection (the transport closed them; its loop is gone)."""
        with self._lock:
            self._waiting.clear()
            self._open.clear()
            self._armed = False

    # I/O thread
    def _close(self, ticket: Ticket) -> None:
        self._loop().call(ticket.closer)

    def _arm(self) -> None:
        with self._lock:
            delay = (next(iter(self._waiting)).deadline - time.monotonic()) if self._waiting else 0.0
        self._loop().later(max(0.0, delay), self._expire)

    def _expire(self) -> None:
        """Close the tickets past their deadline; sleep until the next one's (I/O thread)."""
        now = time.monotonic()
        overdue: list[Ticket] = []
        with self._lock:
            while self._waiting:
                ticket = next(iter(self._waiting))
                if ticket.deadline > now:
                    break
                del self._waiting[ticket]
                overdue.append(ticket)
            if overdue:
                self._shed.note(len(overdue), f"not opened within {self.limits.timeout:g} s: {overdue[0].peer}")
            nxt = next(iter(self._waiting)).deadline if self._waiting else None
            self._armed = nxt is not None
        if nxt is not None:
            self._loop().later(max(0.0, nxt - now), self._expire)
        for ticket in overdue:
            ticket.closer()
