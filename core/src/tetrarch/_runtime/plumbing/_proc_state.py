"""What the OS says of a process: its state letter, stopped procs (frozen), ended ones, and
a periodic tick that notices when its own thread did not run.

Used by a host agent (:class:`StateMonitor` watches its procs) and by ``_launch`` (the
heartbeat and silence clocks tick with :class:`Ticker`). Nothing here needs a router.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..._config import HEARTBEAT_INTERVAL
from ..._log import get_logger
from ..values import _wire

__all__ = ["STALL_FACTOR", "STOPPED_STATES", "StateMonitor", "Ticker", "proc_state", "process_gone"]

_log = get_logger("launch")

#: A periodic thread that wakes later than this many of its intervals was not running
#: meanwhile (its process was stopped, or a C call held the GIL): it restarts its clocks
#: instead of counting the gap against whoever it waits for.
STALL_FACTOR = 2.0


class Ticker:
    """The clock of a periodic loop that notices its own stalls.

    A tick that comes more than ``STALL_FACTOR`` periods late means this process was not
    running meanwhile (stopped, or a C call held the GIL): whatever the loop measures
    must restart rather than count that gap against someone else.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = time.monotonic()

    def tick(self, period: float) -> tuple[float, bool]:
        """``(now, stalled)`` for a tick of a loop running every ``period`` seconds."""
        now = time.monotonic()
        stalled = now - self._last > STALL_FACTOR * period
        self._last = now
        return now, stalled


def proc_state(pid: int) -> str | None:
    """The OS's state letter for the process ``pid`` (the field after the name in ``/proc/<pid>/stat``).

    ``R`` running, ``S`` sleeping, ``D`` uninterruptible wait (all alive), ``T`` stopped
    (SIGSTOP), ``t`` stopped by a tracer (a debugger), ``Z`` zombie (ended, not reaped
    yet), ``X`` dead; None when unknown: no such process, or no procfs (not Linux).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    end = data.rfind(b")")  # the name (in parentheses) may hold spaces and parentheses
    if end < 0 or end + 2 >= len(data):
        return None
    return chr(data[end + 2])


#: States in which a process runs no code until someone resumes it.
STOPPED_STATES = frozenset("Tt")


@dataclass
class _Watched:
    pid: int
    frozen_s: float
    interval_s: float
    stopped_since: float | None = None  # when first seen stopped (this stop)
    reported: bool = False


class StateMonitor:
    """Watches the OS state of the procs a host agent started: one thread for all.

    Every heartbeat interval (the shortest among the host agent's and its procs') it
    reads each proc's state (:func:`proc_state`). A proc seen stopped (``T``/``t``) for
    its frozen timeout, counted from the first sighting, is handed once to
    ``on_frozen(ident, report)``; a proc seen in any other state restarts its count. So
    does a stall of the monitor itself: it cannot vouch for a stop it did not watch.

    A proc in a long C call that holds the GIL is ``R``, ``S`` or ``D``: alive, never
    frozen, although its Python threads answer no heartbeat.
    """

    def __init__(self, on_frozen: Callable[[str, _wire.ProcFrozen], None]) -> None:
        self._on_frozen = on_frozen
        self._lock = threading.Lock()
        self._procs: dict[str, _Watched] = {}
        self._thread: threading.Thread | None = None

    def add(self, ident: str, pid: int, frozen_s: float, interval_s: float) -> None:
        """Watch the proc ``ident`` (process ``pid``) with its own frozen timeout and heartbeat interval."""
        with self._lock:
            self._procs[ident] = _Watched(pid, frozen_s, interval_s)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="tetrarch-proc-states", daemon=True)
                self._thread.start()

    def remove(self, ident: str) -> None:
        with self._lock:
            self._procs.pop(ident, None)

    def _loop(self) -> None:
        clock = Ticker()
        while True:
            with self._lock:
                if not self._procs:
                    self._thread = None
                    return
                period = min([HEARTBEAT_INTERVAL(), *(w.interval_s for w in self._procs.values())])
            time.sleep(period)  # a plain periodic tick; nothing waits on it
            now, stalled = clock.tick(period)
            with self._lock:
                watched = list(self._procs.items())
            for ident, w in watched:
                report = self._check(w, now, stalled)
                if report is not None:
                    try:
                        self._on_frozen(ident, _wire.ProcFrozen(ident, *report, w.frozen_s))
                    except Exception:  # noqa: BLE001 - the monitor thread must survive
                        _log.exception("reporting the frozen proc %s failed", ident)

    @staticmethod
    def _check(w: _Watched, now: float, stalled: bool) -> tuple[str, float] | None:
        state = proc_state(w.pid)
        if state is None or state not in STOPPED_STATES:
            w.stopped_since = None
            return None
        if w.stopped_since is None or stalled:
            w.stopped_since = now
            return None
        stopped = now - w.stopped_since
        if w.reported or stopped < w.frozen_s:
            return None
        w.reported = True
        return state, stopped


def process_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs any more: none exists, or it ended and awaits reaping (a zombie).

    Conservative: a process this one may not signal, or whose state cannot be read, counts as running.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return proc_state(pid) in ("Z", "X")
