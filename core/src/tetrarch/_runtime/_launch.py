"""The ``launch`` service: the processes (host agents, procs) this process started.

Not to be confused with supervision's *owner* (the actor or client that owns a mesh):
this is start-up and liveness bookkeeping. Started processes report ``ready``
(:class:`~._wire.ProcReady`); host agents report the ``exit`` (:class:`~._wire.ProcExit`)
of every proc they started; started processes ``ping`` their launcher
(:func:`start_heartbeat`). Spawners wait on :class:`ReadyWaiter` objects, which fail
with :class:`~tetrarch.ProcessStartError` (exit code + stderr tail) as soon as a
process ends before it was ready — never a hang.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._config import HEARTBEAT_INTERVAL, ORPHAN_TIMEOUT
from .._errors import ProcessStartError, _describe_exit
from . import _serial, _wire
from ._router import PeerUnreachable, Router

__all__ = ["ExitWaiter", "LaunchTracker", "ProcRecord", "ReadyWaiter", "announce_ready", "report_exit",
           "start_heartbeat"]

#: A periodic thread that wakes later than this many of its intervals was not running
#: meanwhile (its process was stopped, or a C call held the GIL): it restarts its clocks
#: instead of counting the gap against whoever it waits for.
STALL_FACTOR = 2.0


@dataclass
class ProcRecord:
    """A started process (proc or host agent) as the process that started it sees it."""

    ident: str  # proc id, or "alloc-id/index" for host agents
    what: str  # for messages: "proc counters[3]" / "host agent 0"
    address: str = ""
    pid: int = 0
    hostname: str = ""
    returncode: int | None = None
    stderr_tail: str = ""
    ready: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    def describe_exit(self) -> str:
        if self.returncode is None:
            return "alive"
        return _describe_exit(self.returncode)


class ReadyWaiter:
    """Waits until every one of a set of processes is ready, or one of them failed."""

    def __init__(self, tracker: LaunchTracker, records: list[ProcRecord]) -> None:
        self.records = records
        self._pending = {r.ident for r in records}
        self.failed: ProcRecord | None = None
        self._cond = threading.Condition(tracker._lock)

    def _update(self, rec: ProcRecord) -> None:  # tracker lock held
        if rec.returncode is not None and not rec.ready and self.failed is None:
            self.failed = rec
        if rec.ready:
            self._pending.discard(rec.ident)
        self._cond.notify_all()

    def wait(self, timeout: float) -> list[ProcRecord]:
        """Block until all are ready.

        Raises:
            ProcessStartError: one exited first (exit code and stderr tail), or the
                timeout passed (names how many were still missing).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending and self.failed is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(self._pending)
                    raise ProcessStartError(
                        f"{len(missing)} of {len(self.records)} processes ({', '.join(missing[:4])}"
                        f"{', ...' if len(missing) > 4 else ''})",
                        None,
                        "",
                        f"not ready after {timeout:.0f} s (raise TETRARCH_PROC_START_TIMEOUT or "
                        f"TETRARCH_HOST_START_TIMEOUT if startup is slow here)",
                    )
                self._cond.wait(left)
            if self.failed is not None:
                rec = self.failed
                raise ProcessStartError(rec.what, rec.returncode, rec.stderr_tail)
        return self.records


class ExitWaiter:
    """Waits until every one of a set of processes has exited."""

    def __init__(self, tracker: LaunchTracker, records: list[ProcRecord]) -> None:
        self._pending = {r.ident for r in records if r.returncode is None}
        self._cond = threading.Condition(tracker._lock)

    def _update(self, rec: ProcRecord) -> None:  # tracker lock held
        if rec.returncode is not None:
            self._pending.discard(rec.ident)
        self._cond.notify_all()

    def wait(self, timeout: float) -> bool:
        """True once all exited; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True


class LaunchTracker:
    """Bookkeeping of the processes this process started (one per process, see :mod:`._root`)."""

    #: How long to wait for a host agent's exit report (exit code, signal) after a
    #: proc's connection dropped, before declaring it dead with a generic reason.
    REPORT_GRACE_S = 0.5

    def __init__(self, runtime: Router) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self._records: dict[str, ProcRecord] = {}
        self._by_address: dict[str, ProcRecord] = {}
        self._waiters: dict[str, list[ReadyWaiter | ExitWaiter]] = {}
        runtime.on_peer_lost(self._peer_lost)
        runtime.add_service(_wire.SVC_LAUNCH, self.service)

    def _peer_lost(self, address: str, error: BaseException | None) -> None:
        """A started process's connection dropped: it (or its host) probably died."""
        rec = self._by_address.get(address)
        if rec is None:
            # Not one of ours (a peer proc, a reference's target): nobody will report
            # its exit here, and on stream transports a dropped connection means the
            # process ended (or is cut off) — fail whatever waits on it now.
            self.runtime.mark_dead(address, f"the connection to the process at {address} was lost "
                                            f"(it exited or became unreachable)")
            return
        if rec.returncode is not None:
            return

        def declare() -> None:
            if rec.returncode is None:
                self.runtime.mark_dead(address, f"{rec.what} (pid {rec.pid} on {rec.hostname or '?'}) is "
                                                f"unreachable: its connection dropped and no exit was reported "
                                                f"(its host agent may have died)")

        timer = threading.Timer(self.REPORT_GRACE_S, declare)
        timer.daemon = True
        timer.start()

    def expect(self, records: list[ProcRecord]) -> ReadyWaiter:
        """Track ``records`` (not started yet); the waiter completes when all are ready."""
        waiter = ReadyWaiter(self, records)
        with self._lock:
            for rec in records:
                self._records[rec.ident] = rec
                self._waiters.setdefault(rec.ident, []).append(waiter)
        return waiter

    def expect_exits(self, records: list[ProcRecord]) -> ExitWaiter:
        """A waiter that completes when every one of ``records`` has exited."""
        waiter = ExitWaiter(self, records)
        with self._lock:
            for rec in records:
                self._waiters.setdefault(rec.ident, []).append(waiter)
        return waiter

    def record(self, ident: str) -> ProcRecord | None:
        return self._records.get(ident)

    def forget(self, ident: str) -> None:
        with self._lock:
            rec = self._records.pop(ident, None)
            if rec is not None and rec.address:
                self._by_address.pop(rec.address, None)
            self._waiters.pop(ident, None)

    def ready(self, ident: str, address: str, pid: int, hostname: str) -> None:
        with self._lock:
            rec = self._records.get(ident)
            if rec is None:
                return
            rec.address, rec.pid, rec.hostname, rec.ready = address, pid, hostname, True
            self._by_address[address] = rec
            self.runtime.revive(address)  # a new process may reuse a dead one's tcp port
            for w in self._waiters.get(ident, ()):
                w._update(rec)

    def exited(self, ident: str, returncode: int, stderr_tail: str) -> None:
        with self._lock:
            rec = self._records.get(ident)
            if rec is None:
                return
            rec.returncode, rec.stderr_tail = returncode, stderr_tail
            for w in self._waiters.get(ident, ()):
                w._update(rec)
            address = rec.address
        if address:
            where = f" on {rec.hostname}" if rec.hostname else ""
            self.runtime.mark_dead(address, f"{rec.what} (pid {rec.pid}{where}) died: {rec.describe_exit()}")

    # -- the service (I/O thread) --------------------------------------------
    def service(self, hdr: _wire.SysHeader, payload: list, _conn: Any) -> None:
        """``launch`` messages: ``ping``, ``ready`` and ``exit`` of processes we started."""
        if hdr.op == "ping":  # heartbeat of a proc or host agent we started
            self.runtime.reply_later(hdr.reply_addr, hdr.reply_port, 0, _wire.OK, None)
            return
        record = _serial.loads(payload)
        if hdr.op == "ready":
            self.ready(record.ident, record.address, record.pid, record.hostname)
        elif hdr.op == "exit":
            self.exited(record.ident, record.returncode, record.stderr_tail)


def announce_ready(runtime: Router, launcher: str, ident: str) -> None:
    """Tell the process that started us that we serve (``launch``/``ready``).

    Raises:
        PeerUnreachable: the launcher is gone.
    """
    ready = _wire.ProcReady(ident, runtime.address, os.getpid(), socket.gethostname())
    runtime.send(launcher, [_wire.sys_header(_wire.SVC_LAUNCH, "ready"), *_serial.dumps(ready)])


def report_exit(runtime: Router, owner: str, ident: str, returncode: int, stderr_tail: str) -> None:
    """Tell ``owner`` how the proc ``ident`` ended (host agents); an unreachable owner is ignored."""
    frames = [_wire.sys_header(_wire.SVC_LAUNCH, "exit"), *_serial.dumps(_wire.ProcExit(ident, returncode,
                                                                                         stderr_tail))]
    try:
        runtime.send(owner, frames)
    except PeerUnreachable:
        pass


def start_heartbeat(runtime: Router, owner: str, on_orphan: Callable[[str], None]) -> threading.Event:
    """Ping ``owner`` (the process that started us) every ``TETRARCH_HEARTBEAT_INTERVAL`` s.

    ``on_orphan(reason)`` runs once when the owner is gone, judged only from evidence
    about the owner: a ping cannot be sent (its connection is gone and cannot be made
    again), or the owner stays silent for ``TETRARCH_ORPHAN_TIMEOUT`` s of *our running
    time* after we asked. The clock starts with the first ping sent after the last
    answer, and restarts when this process itself was stalled — stopped (SIGSTOP, a
    debugger), or its Python threads held off by a C call that keeps the GIL — which the
    loop notices as a tick that comes more than ``STALL_FACTOR`` intervals late. (The
    pings we could not send, and the answers we could not read, while stalled say
    nothing about the owner.) Set the returned event to stop.
    """
    answered = [time.monotonic()]  # when the last answer arrived
    port = runtime.open_port(lambda _hdr, _payload: answered.__setitem__(0, time.monotonic()))
    stop = threading.Event()
    interval, limit = HEARTBEAT_INTERVAL(), ORPHAN_TIMEOUT()

    def loop() -> None:
        asked: float | None = None  # when we sent the first ping that is still unanswered
        tick = time.monotonic()
        while not stop.wait(interval):
            now = time.monotonic()
            if now - tick > STALL_FACTOR * interval:
                asked = None  # we were stalled: the owner gets a full timeout from now
            tick = now
            if asked is not None and answered[0] >= asked:
                asked = None  # answered since we asked
            try:
                runtime.send(owner, [_wire.sys_header(_wire.SVC_LAUNCH, "ping", runtime.address, port)])
            except PeerUnreachable as exc:
                on_orphan(f"its owner at {owner} is unreachable: {exc}")
                return
            if asked is None:
                asked = now
            elif now - asked > limit:
                on_orphan(f"its owner at {owner} answered no ping for {now - asked:.1f} s while this process ran "
                          f"(TETRARCH_ORPHAN_TIMEOUT={limit:g})")
                return

    threading.Thread(target=loop, name="tetrarch-heartbeat", daemon=True).start()
    return stop
