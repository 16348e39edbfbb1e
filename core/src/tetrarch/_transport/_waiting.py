"""Connections waiting to authenticate: one deadline table, one thread, a cap that sheds the oldest.

Whoever can reach a listener can open connections without the secret. Each waits here
from ``on_open`` until it authenticates (``discard``) or is closed: one thread closes
those whose deadline passed (one timeout for all, so arrival order is deadline order),
and an arrival past ``max_pending`` closes the *oldest* waiting one, so strangers who
came first cannot lock real peers out. Nothing per connection but a table entry: no
timer or thread each.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from time import monotonic as _monotonic

from .._log import get_logger
from ._base import Connection

__all__ = ["WaitingRoom"]

_log = get_logger("router")


class WaitingRoom:
    """Accepted connections not authenticated yet, oldest first, each with its deadline."""

    def __init__(self, name: str, timeout: float, max_pending: int,
                 authenticated: Callable[[Connection], bool]) -> None:
        """``authenticated(conn)`` tells, when a deadline passes, whether it just got through."""
        self._timeout = timeout
        self._max = max_pending
        self._authenticated = authenticated
        self._waiting: OrderedDict[Connection, float] = OrderedDict()
        self._cond = threading.Condition(threading.Lock())
        self._stopped = False
        self._shed = 0  # connections closed to keep under the cap, for the log
        self._thread = threading.Thread(target=self._expire_loop, name=f"tetrarch-auth-{name}", daemon=True)

    def start(self) -> None:
        """Start the deadline thread (connections added before wait in the table for it)."""
        self._thread.start()

    def add(self, conn: Connection) -> None:
        """``conn`` waits to authenticate; past the cap the oldest is closed (``conn`` too, if stopped)."""
        shed: list[Connection] = []
        with self._cond:
            if self._stopped:
                shed.append(conn)  # closing: nothing will serve it
            else:
                if not self._waiting:
                    self._cond.notify()  # the deadline thread sleeps without a deadline
                self._waiting[conn] = _monotonic() + self._timeout
                while len(self._waiting) > self._max:
                    shed.append(self._waiting.popitem(last=False)[0])
                so_far = self._shed = self._shed + len(shed)
        if shed and conn not in shed and (so_far - len(shed)) % 1000 == 0:  # the first, then one line per 1000
            _log.warning("%d connections are waiting to authenticate: closing the oldest, %s (%d closed so far)",
                         self._max, shed[0].peer, so_far)
        for c in shed:
            c.close()

    def discard(self, conn: Connection) -> None:
        """``conn`` authenticated or closed: it has no deadline any more."""
        with self._cond:
            self._waiting.pop(conn, None)

    def close(self) -> list[Connection]:
        """End the thread; return the connections still waiting (the caller closes them)."""
        with self._cond:
            self._stopped = True
            waiting = list(self._waiting)
            self._waiting.clear()
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        return waiting

    def _expire_loop(self) -> None:
        while True:
            overdue: list[Connection] = []
            with self._cond:
                while not self._stopped:
                    if not self._waiting:
                        self._cond.wait()
                        continue
                    now = _monotonic()
                    while self._waiting:
                        conn, deadline = next(iter(self._waiting.items()))
                        if deadline > now:
                            break
                        del self._waiting[conn]
                        overdue.append(conn)
                    if overdue:
                        break
                    self._cond.wait(deadline - now)
                if self._stopped:
                    return
            overdue = [c for c in overdue if not self._authenticated(c)]
            if overdue:
                _log.warning("closing %d connection(s) that did not authenticate within %g s (%s%s)",
                             len(overdue), self._timeout, overdue[0].peer, ", ..." if len(overdue) > 1 else "")
            for conn in overdue:
                conn.close()
