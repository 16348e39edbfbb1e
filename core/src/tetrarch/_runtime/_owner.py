"""The ``owner`` service: tracks host agents and procs this process started.

Host agents report ``host_ready``; procs report ``proc_ready``; host agents report
``proc_exit`` for every proc they started. Spawners wait on :class:`Waiter` objects,
which fail with :class:`~tetrarch.ProcessStartError` (exit code + stderr tail) as
soon as a process ends before it was ready — never a hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._config import HEARTBEAT_INTERVAL, ORPHAN_TIMEOUT
from .._errors import ProcessStartError, _describe_exit
from . import _serial, _wire
from ._proc import PeerUnreachable, ProcRuntime

__all__ = ["Owner", "ProcRecord", "Waiter", "start_heartbeat"]


@dataclass
class ProcRecord:
    """A started process (proc or host agent) as its owner sees it."""

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


class Waiter:
    """Waits until every one of a set of processes is ready, or one of them failed."""

    def __init__(self, owner: Owner, records: list[ProcRecord]) -> None:
        self._owner = owner
        self.records = records
        self._pending = {r.ident for r in records}
        self.failed: ProcRecord | None = None
        self._cond = threading.Condition(owner._lock)

    def _update(self, rec: ProcRecord) -> None:  # owner lock held
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


class ExitWaiter(Waiter):
    """Waits until every one of a set of processes has exited."""

    def __init__(self, owner: Owner, records: list[ProcRecord]) -> None:
        super().__init__(owner, records)
        self._pending = {r.ident for r in records if r.returncode is None}

    def _update(self, rec: ProcRecord) -> None:  # owner lock held
        if rec.returncode is not None:
            self._pending.discard(rec.ident)
        self._cond.notify_all()

    def wait(self, timeout: float) -> bool:  # type: ignore[override]
        """True once all exited; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True


class Owner:
    """Bookkeeping of the processes this process started (an instance per Root)."""

    #: How long to wait for a host agent's exit report (exit code, signal) after a
    #: proc's connection dropped, before declaring it dead with a generic reason.
    REPORT_GRACE_S = 0.5

    def __init__(self, runtime: ProcRuntime) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self._records: dict[str, ProcRecord] = {}
        self._by_address: dict[str, ProcRecord] = {}
        self._waiters: dict[str, list[Waiter]] = {}
        runtime.on_peer_lost(self._peer_lost)

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

    def expect(self, records: list[ProcRecord]) -> Waiter:
        waiter = Waiter(self, records)
        with self._lock:
            for rec in records:
                self._records[rec.ident] = rec
                self._waiters.setdefault(rec.ident, []).append(waiter)
        return waiter

    def expect_exits(self, records: list[ProcRecord]) -> ExitWaiter:
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
    def service(self, hdr: tuple, payload: list, _conn: Any) -> None:
        op = hdr[2]
        if op == "ping":  # heartbeat of a proc or host agent we started
            self.runtime._reply_later(hdr[3], hdr[4], 0, 0, None)
            return
        args = _serial.loads(payload)
        if op == "ready":
            self.ready(*args)
        elif op == "exit":
            self.exited(*args)


def start_heartbeat(runtime: ProcRuntime, owner: str, on_orphan: Callable[[str], None]) -> threading.Event:
    """Ping ``owner`` every ``TETRARCH_HEARTBEAT_INTERVAL`` s from a daemon thread.

    ``on_orphan(reason)`` runs once if the owner cannot be reached or leaves pings
    unanswered for ``TETRARCH_ORPHAN_TIMEOUT`` s. Set the returned event to stop.
    """
    last = [time.monotonic()]
    port = runtime.open_port(lambda _hdr, _payload: last.__setitem__(0, time.monotonic()))
    stop = threading.Event()
    interval, limit = HEARTBEAT_INTERVAL(), ORPHAN_TIMEOUT()

    def loop() -> None:
        while not stop.wait(interval):
            try:
                runtime.send(owner, [_wire.header(_wire.SYS, "owner", "ping", runtime.address, port)])
            except PeerUnreachable as exc:
                on_orphan(f"its owner at {owner} is unreachable: {exc}")
                return
            if time.monotonic() - last[0] > limit:
                on_orphan(f"its owner at {owner} did not answer for {limit:g} s (TETRARCH_ORPHAN_TIMEOUT)")
                return

    threading.Thread(target=loop, name="tetrarch-heartbeat", daemon=True).start()
    return stop
