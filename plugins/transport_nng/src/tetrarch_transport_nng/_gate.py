"""The stage before ``on_open``, held to the kernel's bounds on strangers (:class:`~tetrarch.plugins.PreAuthLimits`).

The listener accepts connections itself (``_listen.py``) and hands each descriptor to a
fresh nng ``pair0`` socket, which opens the connection once nng's 8-byte SP header
exchange completes on it. Whoever reaches the address can connect and send nothing (or
part of a header): nng would wait for it without a callback. A :class:`Gate` (one per
transport) bounds that stage:

* each accepted connection holds one :class:`Ticket` from ``accept`` until its pipe opens
  (nng finished the header exchange) or it goes;
* a ticket older than ``limits.timeout`` is closed (its closer runs on the I/O thread);
* at most ``limits.max_pending`` tickets wait at once, and waiting tickets plus open
  connections stay within ``limits.connection_limit()``: a new arrival closes the
  *oldest* waiting one, so strangers can't lock real peers out by arriving first;
* when open connections alone fill ``connection_limit()``, a new arrival is refused
  (closed at ``accept``) with a log line at most every :data:`_LOG_EVERY` seconds.

The default limit (``max_connections`` None: :func:`~tetrarch.plugins.connection_cap`, half
the open-file limit) is meant in descriptors, one per connection; an open nng connection
holds :data:`OPEN_FDS` (its stream and nng's notification pipe), so against that default
each counts :data:`OPEN_FDS` times, and a flood of strangers that open (send nng's header)
stays within half the open-file limit too. An explicit ``max_connections`` counts connections.

A waiting connection holds one descriptor and an nng socket that has read at most the
8-byte header; nothing more is read before the pipe opens (``_listen.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from tetrarch.plugins import PreAuthLimits, connection_cap

if TYPE_CHECKING:
    from tetrarch.plugins import Connection, IoLoop

__all__ = ["OPEN_FDS", "Gate", "Ticket"]

_log = logging.getLogger("tetrarch.transport.nng")

#: Seconds between two log lines about refused or closed strangers (the count in between is reported).
_LOG_EVERY = 10.0
#: Descriptors an open connection holds: its stream and nng's notification pipe (two). A
#: waiting one holds its stream only (``NngConnection.start`` asks for the pipe).
OPEN_FDS = 3


def _budget(limits: PreAuthLimits) -> tuple[int, int]:
    """The limit on open plus waiting connections, and what one open connection counts toward it."""
    if limits.max_connections is not None:
        return limits.max_connections, 1
    return connection_cap(), OPEN_FDS


def _nothing() -> None:
    pass


class Ticket:
    """One accepted connection waiting for its opening: what closes it, and when it must be open."""

    __slots__ = ("closer", "deadline", "peer")

    def __init__(self, deadline: float, peer: str) -> None:
        #: Closes the connection (called at most once, on the I/O thread); set by whoever
        #: was admitted, right after :meth:`Gate.admit` (on the I/O thread too).
        self.closer: Callable[[], None] = _nothing
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
        self._waiting: OrderedDict[Ticket, None] = OrderedDict()  # in arrival order
        self._open: set[Connection] = set()
        self._armed = False  # a deadline timer is scheduled on the loop
        self._refused = _Throttled("nng: connections refused")
        self._shed = _Throttled("nng: connections closed before they opened")

    @property
    def waiting(self) -> int:
        """How many tickets wait now."""
        return len(self._waiting)

    @property
    def open_count(self) -> int:
        """How many connections count as open now."""
        return len(self._open)

    def admit(self, peer: str) -> Ticket | None:
        """A ticket for a connection accepted now, or None when open connections fill the limit (refuse it).

        Past ``max_pending`` (or the room open connections leave under the limit) the oldest
        waiting tickets are closed: their closers run on the I/O thread, after the caller
        (on that thread too) has set the new ticket's. Never raises.
        """
        limits = self.limits
        limit, weight = _budget(limits)
        with self._lock:
            used = weight * len(self._open)
            if used >= limit:
                held = f" (holding {used} descriptors)" if weight > 1 else ""
                self._refused.note(1, f"{len(self._open)} connections are open{held}, limit {limit}; refused {peer}")
                return None
            ticket = Ticket(time.monotonic() + limits.timeout, peer)
            self._waiting[ticket] = None
            room = min(limits.max_pending, limit - used)
            shed = []
            while len(self._waiting) > room:
                shed.append(self._waiting.popitem(last=False)[0])
            if shed:
                self._shed.note(len(shed), f"{room} wait for their opening; closing the oldest, {shed[0].peer}")
            arm = not self._armed
            self._armed = True
        if arm:
            self._loop().call(self._arm)
        for old in shed:
            self._close(old)
        return ticket

    def refused(self, detail: str) -> None:
        """Log (at most every :data:`_LOG_EVERY` s) that a connection was refused: ``detail`` says which, why."""
        with self._lock:
            self._refused.note(1, detail)

    def leave(self, ticket: Ticket | None) -> bool:
        """``ticket``'s connection opened or went away: it no longer waits. Whether it waited
        (False: the gate closed it, its closer is queued or ran)."""
        if ticket is None:
            return False
        with self._lock:
            return self._waiting.pop(ticket, 1) is None

    def open(self, ticket: Ticket | None, conn: Connection) -> bool:
        """``ticket``'s connection ``conn`` opens: count it as open (until :meth:`released`) if it
        still waits and there is room. Whether it may open (False: close it, unreported).

        An open connection counts more than a waiting one against the default limit, so the
        oldest waiting tickets are closed to make room; if open ones alone fill the limit,
        ``conn`` is refused (logged). Never raises.
        """
        if ticket is None:
            return False
        limits = self.limits
        limit, weight = _budget(limits)
        shed = []
        with self._lock:
            if self._waiting.pop(ticket, 1) is not None:
                return False  # the gate closed it meanwhile (its closer is queued)
            used = weight * (len(self._open) + 1)
            if used > limit:
                self._refused.note(1, f"{len(self._open)} connections are open, limit {limit}; refused {ticket.peer}")
                return False
            while self._waiting and used + len(self._waiting) > limit:
                shed.append(self._waiting.popitem(last=False)[0])
            if shed:
                self._shed.note(len(shed), f"room for an opening one; closing the oldest, {shed[0].peer}")
            self._open.add(conn)
        for old in shed:
            self._close(old)
        return True

    def opened(self, conn: Connection) -> None:
        """Count ``conn`` as open (until :meth:`released`): a dialed connection."""
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
        self._loop().call(lambda: ticket.closer())  # the closer as it is when the call runs

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
