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

Below the pipes lies a stage this code cannot see: nng accepts a connection and keeps it
until the 8-byte SP header exchange completes or its own 10 s timeout passes, with no
callback and no cap. So while a listener is open the gate also counts the process's open
descriptors every :data:`_FD_CHECK_EVERY` seconds and logs a warning when they exceed the
connection limit (a flood of connections that never send nng's header).

What each waiting connection may make nng buffer is bounded where the sockets are made
(``_nng.py``: the ``rep0`` socket's ``recv_max_size`` is one rendezvous request; an unclaimed
``pair0`` socket queues one message of at most ``CHUNK`` bytes besides the one its pipe reads).
"""

from __future__ import annotations

import logging
import os
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
#: Seconds between two counts of the process's open descriptors while a listener is open.
_FD_CHECK_EVERY = 1.0


def descriptors_open() -> int:
    """How many descriptors this process has open (Linux; -1 where it can't be told). Never raises."""
    try:
        n = os.stat("/proc/self/fd").st_size  # the count itself on Linux 6.2+, 0 before
        return n if n > 0 else len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


class Ticket:
    """One would-be connection waiting for its opening: what closes it, and when it must be open."""

    __slots__ = ("closer", "deadline", "order", "peer")

    def __init__(self, closer: Callable[[], None], deadline: float, peer: str, order: int) -> None:
        #: Closes whatever the connection holds now (called once, on the I/O thread); swapped
        #: when the ticket passes from the ``rep0`` pipe to the connection's ``pair0`` socket.
        self.closer = closer
        self.deadline = deadline
        self.peer = peer
        #: Arrival order for shedding, oldest lowest: nng numbers a pipe when it accepts the
        #: connection, before the header exchange (whose end, when the pipe reaches this code,
        #: can come in another order under a burst).
        self.order = order


def _order(ticket: Ticket) -> int:
    return ticket.order


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
        self._crowded = _Throttled("nng: descriptors in use exceed the connection limit")
        self._listeners = 0
        self._fd_armed = False  # a descriptor count is scheduled on the loop

    @property
    def waiting(self) -> int:
        """How many tickets wait now."""
        return len(self._waiting)

    @property
    def open_count(self) -> int:
        """How many connections count as open now."""
        return len(self._open)

    def admit(self, closer: Callable[[], None], peer: str, order: int) -> Ticket | None:
        """A ticket for a new arrival, or None when open connections fill the limit (refuse it).

        ``order`` ranks arrivals (the nng pipe id: lower arrived first); past the caps the
        waiting ticket of lowest order is closed.

        Admitting may close the oldest waiting tickets (their closers run on the I/O thread).
        Never raises.
        """
        limits = self.limits
        limit = limits.connection_limit()
        with self._lock:
            if len(self._open) >= limit:
                self._refused.note(1, f"{len(self._open)} connections are open (limit {limit}); refused {peer}")
                return None
            ticket = Ticket(closer, time.monotonic() + limits.timeout, peer, order)
            self._waiting[ticket] = None
            room = min(limits.max_pending, limit - len(self._open))
            shed = []
            while len(self._waiting) > room:  # past a cap only (a scan of at most max_pending + 1)
                oldest = min(self._waiting, key=_order)
                del self._waiting[oldest]
                shed.append(oldest)
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

    def listening(self, delta: int) -> None:
        """A listener opened (+1) or closed (-1); the descriptor count runs while any is open."""
        with self._lock:
            self._listeners += delta
            start = self._listeners > 0 and not self._fd_armed
            self._fd_armed = self._fd_armed or start
        if start:
            self._loop().call(lambda: self._loop().later(_FD_CHECK_EVERY, self._check_descriptors))

    def reset(self) -> None:
        """Forget every ticket and connection (the transport closed them; its loop is gone)."""
        with self._lock:
            self._waiting.clear()
            self._open.clear()
            self._armed = False
            self._listeners = 0
            self._fd_armed = False

    # I/O thread
    def _check_descriptors(self) -> None:
        with self._lock:
            if self._listeners <= 0:
                self._fd_armed = False
                return
        n, limit = descriptors_open(), self.limits.connection_limit()
        if n > limit:
            with self._lock:
                self._crowded.note(1, f"{n} open, connection limit {limit} ({len(self._open)} connections open, "
                                      f"{len(self._waiting)} waiting for their opening); connections that never "
                                      "finish nng's SP header are closed by nng after 10 s")
        self._loop().later(_FD_CHECK_EVERY, self._check_descriptors)

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
