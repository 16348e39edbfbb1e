"""The ``launch`` service: the processes (host agents, procs) this process started.

Not to be confused with supervision's *owner* (the actor or client that owns a mesh):
this is start-up and liveness bookkeeping. Started processes report ``ready``
(:class:`~._wire.ProcReady`); host agents report the ``exit`` (:class:`~._wire.ProcExit`)
of every proc they started; started processes ``ping`` their launcher
(:func:`start_heartbeat`). Spawners wait on :class:`ReadyWaiter` objects, which fail
with :class:`~tetrarch.ProcessStartError` (exit code + stderr tail) as soon as a
process ends before it was ready — never a hang.

Liveness (the rules are in ``docs/supervision.md``, "Liveness"):

* A started process concludes that its launcher is gone only from evidence about the
  launcher: a dropped connection, or pings left unanswered for ``TETRARCH_ORPHAN_TIMEOUT``
  seconds of its *own running time* (:func:`start_heartbeat`); its own stalls never count.
* A host agent watches the OS state of its procs (:class:`StateMonitor`); one stopped for
  ``TETRARCH_FROZEN_TIMEOUT`` seconds is reported ``frozen`` (:class:`~._wire.ProcFrozen`)
  to its owner, which declares it dead, and then killed.
* The launcher notes when each started process last pinged; one silent while nobody
  reported it frozen is *busy* (a call that holds the GIL): logged once, not a failure.
* A host agent runs no user code, so its silence is no sign of work: one silent for
  ``TETRARCH_HOST_TIMEOUT`` seconds is declared unreachable (its host's network was cut,
  or the host froze), and so is every proc it started that is as silent, failing their
  calls (a proc that still pings lives on). An agent that lives on behind a cut exits as
  an orphan and takes its procs with it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..._config import FROZEN_TIMEOUT, HEARTBEAT_INTERVAL, HOST_TIMEOUT, ORPHAN_TIMEOUT
from ..._errors import ProcessStartError, _describe_exit
from ..._events import emit
from ..._log import get_logger
from ..plumbing._proc_state import StateMonitor, Ticker, proc_state, process_gone
from ..router._router import PeerUnreachable, Router
from ..values import _serial, _wire

__all__ = [
    "ExitWaiter",
    "LaunchTracker",
    "ProcRecord",
    "ReadyWaiter",
    "StateMonitor",
    "announce_ready",
    "proc_state",
    "process_gone",
    "report_exit",
    "report_frozen",
    "start_heartbeat",
    "stderr_note",
]

_log = get_logger("launch")

#: The launcher reports a proc as busy once it has been silent this many heartbeat
#: intervals past its frozen timeout (by then a stopped proc would have been reported frozen).
BUSY_MARGIN_INTERVALS = 4.0


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
    #: Declared dead without an exit report (its connection dropped and none came).
    lost: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    #: "proc" (its host agent watches its OS state) or "host agent" (nobody does).
    kind: str = "proc"
    #: The heartbeat interval and frozen timeout it runs with (as it said when ready).
    heartbeat_s: float = HEARTBEAT_INTERVAL.default
    frozen_s: float = FROZEN_TIMEOUT.default
    #: Why its host agent killed it, when it did (frozen).
    killed_because: str = ""
    #: Why it was declared lost, when it was.
    lost_reason: str = ""

    @property
    def gone(self) -> bool:
        """Whether the process exited or was declared lost: nothing more will come from it."""
        return self.returncode is not None or self.lost

    def describe_exit(self) -> str:
        if self.returncode is None:
            return "alive"
        text = _describe_exit(self.returncode)
        return f"{text} ({self.killed_because})" if self.killed_because else text

    def where(self) -> str:
        """``pid 123 on host`` for messages."""
        return f"pid {self.pid}" + (f" on {self.hostname}" if self.hostname else "")


#: The most of a dead proc's stderr tail that its death reason quotes (its last lines).
_TAIL_IN_REASON = 8


def stderr_note(tail: str) -> str:
    """``; its stderr ended with: ...`` (the last few lines, indented) for a death reason; '' if none."""
    lines = [line.rstrip() for line in tail.splitlines() if line.strip()][-_TAIL_IN_REASON:]
    if not lines:
        return ""
    return "; its stderr ended with:\n" + "\n".join("    " + line[:500] for line in lines)


class ReadyWaiter:
    """Waits until every one of a set of processes is ready, or one of them failed."""

    def __init__(self, tracker: LaunchTracker, records: list[ProcRecord]) -> None:
        self.records = records
        self._pending = {r.ident for r in records}
        self.failed: ProcRecord | None = None
        self._cond = threading.Condition(tracker._lock)

    def _update(self, rec: ProcRecord) -> None:  # tracker lock held
        if (rec.returncode is not None or rec.lost) and not rec.ready and self.failed is None:
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
                raise ProcessStartError(rec.what, rec.returncode, rec.stderr_tail, rec.lost_reason)
        return self.records


class ExitWaiter:
    """Waits until every one of a set of processes has exited.

    ``reports``: wait for their exit *reports* (what their host agents send after the
    last line of their output), not for a proc declared lost because its connection
    dropped first: a stop must not return before the procs' output arrived.
    """

    def __init__(self, tracker: LaunchTracker, records: list[ProcRecord], reports: bool = False) -> None:
        self._reports = reports
        self._records = records
        self._pending = {r.ident for r in records if not self._done(r)}
        self._cond = threading.Condition(tracker._lock)

    def _done(self, rec: ProcRecord) -> bool:
        return rec.returncode is not None if self._reports else rec.gone

    def _update(self, rec: ProcRecord) -> None:  # tracker lock held
        if self._done(rec):
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

    def wait_until(self, over: Callable[[ProcRecord], bool], deadline: float) -> bool:
        """True once ``over(record)`` holds for every record; False at ``deadline`` (``time.monotonic()``).

        ``over`` is checked whenever a record changes, and at least every
        :data:`RECHECK_S` (it may depend on more than the records, e.g. dead peers).
        """
        with self._cond:
            while not all(over(r) for r in self._records):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, self.RECHECK_S))
        return True

    #: Seconds between checks of :meth:`wait_until`'s condition when no record changes.
    RECHECK_S = 1.0


class LaunchTracker:
    """Bookkeeping of the processes this process started (one per process, see :mod:`._root`)."""

    #: How long to wait for a host agent's exit report (exit code, signal) after a
    #: proc's connection dropped, before declaring it dead with a generic reason.
    REPORT_GRACE_S = 0.5

    def __init__(self, router: Router) -> None:
        self.router = router
        self._lock = threading.Lock()
        self._records: dict[str, ProcRecord] = {}
        self._by_address: dict[str, ProcRecord] = {}
        self._waiters: dict[str, list[ReadyWaiter | ExitWaiter]] = {}
        self._heard: dict[str, float] = {}  # address -> when its last ping arrived (monotonic)
        self._silent: dict[str, float] = {}  # address -> when its reported (busy) silence began
        self._watchdog: threading.Thread | None = None
        router.on_peer_lost(self._peer_lost)
        router.add_service(_wire.SVC_LAUNCH, self.service)

    def _peer_lost(self, address: str, error: BaseException | None) -> None:
        """A started process's connection dropped: it (or its host) probably died."""
        rec = self._by_address.get(address)
        if rec is None:
            # Not one of ours (a peer proc, a reference's target): nobody will report
            # its exit here, and on stream transports a dropped connection means the
            # process ended (or is cut off) — fail whatever waits on it now.
            self.router.mark_dead(address, f"the connection to the process at {address} was lost "
                                            f"(it exited or became unreachable)")
            return
        if rec.returncode is not None:
            return

        def declare() -> None:
            if rec.returncode is None:
                self._declare_lost(rec, f"{rec.what} (pid {rec.pid} on {rec.hostname or '?'}) is unreachable: its "
                                        f"connection dropped and no exit was reported (its host agent may have died)")

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

    def expect_exits(self, records: list[ProcRecord], reports: bool = False) -> ExitWaiter:
        """A waiter that completes when every one of ``records`` has exited (``reports``: been reported exited)."""
        waiter = ExitWaiter(self, records, reports)
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
                self._heard.pop(rec.address, None)
                self._silent.pop(rec.address, None)
            self._waiters.pop(ident, None)

    def ready(self, ident: str, address: str, pid: int, hostname: str,
              heartbeat_s: float = HEARTBEAT_INTERVAL.default, frozen_s: float = FROZEN_TIMEOUT.default) -> None:
        """The process ``ident`` serves at ``address``; it pings every ``heartbeat_s`` s and its host
        agent reports it frozen after ``frozen_s`` s stopped (the settings it runs with)."""
        with self._lock:
            rec = self._records.get(ident)
            if rec is None:
                return
            rec.address, rec.pid, rec.hostname, rec.ready = address, pid, hostname, True
            rec.heartbeat_s, rec.frozen_s = heartbeat_s, frozen_s
            self._by_address[address] = rec
            self._heard[address] = time.monotonic()
            self._silent.pop(address, None)
            self.router.revive(address)  # a new process may reuse a dead one's tcp port
            for w in self._waiters.get(ident, ()):
                w._update(rec)
            if rec.kind == "host agent":
                emit("host.ready", ident=ident, address=address, host=hostname, host_pid=pid)
            else:
                emit("proc.ready", ident=ident, name=rec.what, address=address, host=hostname, proc_pid=pid)
            if self._watchdog is None:
                self._watchdog = threading.Thread(target=self._watch_heartbeats, name="tetrarch-liveness",
                                                  daemon=True)
                self._watchdog.start()

    def exited(self, ident: str, returncode: int, stderr_tail: str) -> None:
        with self._lock:
            rec = self._records.get(ident)
            if rec is None:
                return
            rec.returncode, rec.stderr_tail = returncode, stderr_tail
            for w in self._waiters.get(ident, ()):
                w._update(rec)
            address = rec.address
        if rec.kind == "host agent":
            emit("host.exited", ident=ident, returncode=returncode, why=rec.describe_exit())
        else:
            emit("proc.exited", ident=ident, name=rec.what, returncode=returncode, why=rec.describe_exit())
        if address:
            self.router.mark_dead(address, f"{rec.what} ({rec.where()}) died: {rec.describe_exit()}"
                                            f"{stderr_note(stderr_tail)}")

    def frozen(self, report: _wire.ProcFrozen) -> None:
        """Its host agent found the proc ``report.ident`` stopped too long: declare it dead now.

        The host agent kills it next; its exit report then changes nothing but the record.
        """
        with self._lock:
            rec = self._records.get(report.ident)
            if rec is None or rec.returncode is not None:
                return
            rec.killed_because = (f"frozen: stopped (state {report.state}) for {report.stopped_s:.1f} s, "
                                  f"past TETRARCH_FROZEN_TIMEOUT={report.timeout_s:g} s")
            address = rec.address
        reason = (f"{rec.what} ({rec.where()}) is frozen: its host agent saw it stopped (state {report.state}) "
                  f"for {report.stopped_s:.1f} s, past TETRARCH_FROZEN_TIMEOUT={report.timeout_s:g} s, "
                  f"and kills it")
        _log.info("%s", reason)  # the failure itself reaches the proc's callers and supervision
        if address:
            self.router.mark_dead(address, reason)

    # -- heartbeats (the watchdog thread) ------------------------------------
    def _watch_heartbeats(self) -> None:
        """Note started processes whose pings stop: busy (logged once per silence), not failed.

        Runs while some started process is alive and ready. A stall of this process
        itself (a tick that comes late) restarts every silence clock: pings that could
        not be handled meanwhile say nothing about their senders.
        """
        restart = time.monotonic()
        clock = Ticker()
        while True:
            with self._lock:
                live = [r for r in self._records.values()
                        if r.ready and r.returncode is None and not r.lost and r.address]
                if not live:
                    self._watchdog = None
                    return
            period = min([HEARTBEAT_INTERVAL(), *(r.heartbeat_s for r in live)])
            time.sleep(period)  # a plain periodic tick; nothing waits on it
            now, stalled = clock.tick(period)
            if stalled:  # we were not running: restart every clock
                restart = now
            for rec in sorted(live, key=lambda r: r.kind == "proc"):  # agents first: their procs follow
                self._check_silence(rec, now, restart)

    def _check_silence(self, rec: ProcRecord, now: float, restart: float) -> None:
        address = rec.address
        if address in self.router.dead_peers:
            return
        heard = self._heard.get(address, restart)
        since = self._silent.get(address)
        if since is not None:
            if heard > since:  # it pings again: the episode is over
                self._silent.pop(address, None)
                _log.info("%s (%s) pings again after %.1f s of silence", rec.what, rec.where(), heard - since)
            return
        since = max(heard, restart)
        silent = now - since
        agent = rec.meta.get("agent")
        if rec.kind != "proc" or (agent and agent in self.router.dead_peers):
            limit = HOST_TIMEOUT()  # a host agent, or a proc of one that went silent
            if silent > limit:
                self._unreachable(rec, silent, limit)
            return
        if rec.frozen_s != float("inf"):
            limit = rec.frozen_s + BUSY_MARGIN_INTERVALS * rec.heartbeat_s
            verdict = ("its host agent sees it running (it did not report it stopped), so it is busy: a call "
                       "that holds the GIL, such as a long C function, keeps its Python threads from answering. "
                       "Not a failure")
        else:
            limit = max(10.0, 10 * rec.heartbeat_s)
            verdict = "it is busy or stopped (nothing watches the OS state of a proc when TETRARCH_FROZEN_TIMEOUT=inf)"
        if silent > limit:
            self._silent[address] = since
            _log.warning("%s (%s) has sent no heartbeat for %.1f s; %s", rec.what, rec.where(), silent, verdict)

    def _unreachable(self, rec: ProcRecord, silent: float, limit: float) -> None:
        """``rec`` (a host agent, or a proc of one found unreachable) sent no heartbeat for ``silent`` s.

        A proc of an unreachable agent that still pings (only the agent froze) lives on.
        """
        if rec.kind == "proc":
            reason = (f"{rec.what} ({rec.where()}) is unreachable: no heartbeat for {silent:.1f} s, nor from its "
                      f"host agent (TETRARCH_HOST_TIMEOUT={limit:g}): its host's network was cut, or the host froze")
        else:
            reason = (f"{rec.what} ({rec.where()}) is unreachable: no heartbeat for {silent:.1f} s "
                      f"(TETRARCH_HOST_TIMEOUT={limit:g}): its host's network was cut, or the host or the agent "
                      f"froze")
        _log.warning("%s", reason)
        self._declare_lost(rec, reason)

    def _declare_lost(self, rec: ProcRecord, reason: str) -> None:
        """``rec`` is gone without an exit report: fail what waits on it, and whoever waits for its exit stops.

        A host agent takes its procs with it (docs/supervision.md, "Liveness"): each is told
        to exit and declared lost, and one still starting fails its ``spawn_procs``.
        """
        if rec.address:
            self.router.mark_dead(rec.address, reason)
        with self._lock:
            rec.lost = True
            rec.lost_reason = rec.lost_reason or reason
            for w in self._waiters.get(rec.ident, ()):
                w._update(rec)
            orphans = [r for r in self._records.values()
                       if rec.kind != "proc" and rec.address and r.meta.get("agent") == rec.address and not r.gone]
        for proc in orphans:
            self._lose_with_agent(proc, rec, reason)

    def _lose_with_agent(self, proc: ProcRecord, agent: ProcRecord, why: str) -> None:
        """``agent`` was declared lost: so is ``proc``; a running one is told to exit first."""
        reason = (f"{proc.what} is lost with its host agent: {why}. A proc whose host agent is lost is stopped "
                  f"(nothing would report its exit, forward its output or start its successors)")
        if proc.ready and proc.address and proc.address not in self.router.dead_peers:
            try:
                self.router.send(proc.address, [_wire.sys_header(_wire.SVC_PROC, "exit"),
                                                  *_serial.dumps(f"its host agent ({agent.where()}) is lost: {why}")])
            except PeerUnreachable:
                pass
        self._declare_lost(proc, reason)

    # -- the service (I/O thread) --------------------------------------------
    def service(self, hdr: _wire.SysHeader, payload: list, _conn: Any) -> None:
        """``launch`` messages: ``ping``, ``ready``, ``exit`` and ``frozen`` of processes we started."""
        if hdr.op == "ping":  # heartbeat of a proc or host agent we started
            if hdr.reply_addr is not None:
                self._heard[hdr.reply_addr] = time.monotonic()
            self.router.reply_later(hdr.reply_addr, hdr.reply_port, 0, _wire.OK, None)
            return
        record = _serial.loads(payload)
        if hdr.op == "ready":
            self.ready(record.ident, record.address, record.pid, record.hostname, record.heartbeat_s,
                       record.frozen_s)
        elif hdr.op == "exit":
            self.exited(record.ident, record.returncode, record.stderr_tail)
        elif hdr.op == "frozen":
            self.frozen(record)


def announce_ready(router: Router, launcher: str, ident: str) -> None:
    """Tell the process that started us that we serve (``launch``/``ready``).

    Raises:
        PeerUnreachable: the launcher is gone.
    """
    ready = _wire.ProcReady(ident, router.address, os.getpid(), socket.gethostname(), HEARTBEAT_INTERVAL(),
                            FROZEN_TIMEOUT())
    router.send(launcher, [_wire.sys_header(_wire.SVC_LAUNCH, "ready"), *_serial.dumps(ready)])


def _tell(router: Router, owner: str, op: str, record: Any) -> None:
    """Send ``launch``/``op`` with ``record`` to ``owner``; an unreachable owner is ignored."""
    try:
        router.send(owner, [_wire.sys_header(_wire.SVC_LAUNCH, op), *_serial.dumps(record)])
    except PeerUnreachable:
        pass


def report_exit(router: Router, owner: str, ident: str, returncode: int, stderr_tail: str) -> None:
    """Tell ``owner`` how the proc ``ident`` ended (host agents); an unreachable owner is ignored."""
    _tell(router, owner, "exit", _wire.ProcExit(ident, returncode, stderr_tail))


def report_frozen(router: Router, owner: str, report: _wire.ProcFrozen) -> None:
    """Tell ``owner`` that a proc it owns is frozen (host agents; not from the I/O thread); an unreachable
    owner is ignored."""
    _tell(router, owner, "frozen", report)


def start_heartbeat(router: Router, owner: str, on_orphan: Callable[[str], None]) -> threading.Event:
    """Ping ``owner`` (the process that started us) every ``TETRARCH_HEARTBEAT_INTERVAL`` s.

    ``on_orphan(reason)`` runs once when the owner is gone, judged only from evidence
    about the owner: a ping cannot be sent (its connection is gone and cannot be made
    again), or the owner stays silent for ``TETRARCH_ORPHAN_TIMEOUT`` s of *our running
    time* after we asked. The clock starts with the first ping sent after the last
    answer, and restarts when this process itself was stalled — stopped (SIGSTOP, a
    debugger), or its Python threads held off by a C call that keeps the GIL — which the
    loop notices as a tick that comes more than ``STALL_FACTOR`` intervals late. (The
    pings we could not send, and the answers we could not read, while stalled say
    nothing about the owner.) Set the returned event to stop, before this process closes
    its runtime: a ping that fails after that is not reported.
    """
    answered = [time.monotonic()]  # when the last answer arrived
    port = router.open_port(lambda _hdr, _payload: answered.__setitem__(0, time.monotonic()))
    stop = threading.Event()
    interval, limit = HEARTBEAT_INTERVAL(), ORPHAN_TIMEOUT()

    def loop() -> None:
        asked: float | None = None  # when we sent the first ping that is still unanswered
        clock = Ticker()
        while not stop.wait(interval):
            now, stalled = clock.tick(interval)
            if stalled:
                asked = None  # we were stalled: the owner gets a full timeout from now
            if asked is not None and answered[0] >= asked:
                asked = None  # answered since we asked
            try:
                router.send(owner, [_wire.sys_header(_wire.SVC_LAUNCH, "ping", router.address, port)])
            except PeerUnreachable as exc:
                if not stop.is_set():  # else this process is closing its runtime: not the owner's doing
                    on_orphan(f"its owner at {owner} is unreachable: {exc}")
                return
            if asked is None:
                asked = now
            elif now - asked > limit and not stop.is_set():
                on_orphan(f"its owner at {owner} answered no ping for {now - asked:.1f} s while this process ran "
                          f"(TETRARCH_ORPHAN_TIMEOUT={limit:g})")
                return

    threading.Thread(target=loop, name="tetrarch-heartbeat", daemon=True).start()
    return stop
