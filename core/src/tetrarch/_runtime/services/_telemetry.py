"""Each host's telemetry store, the rows sent to it, and SQL over all of them.

A host agent keeps its host's store (:class:`~tetrarch._telemetry._store.TelemetryStore`)
behind the ``telemetry`` service: ``rows`` (a batch from one of its procs' recorders, kept in
order by one thread of its own; at most ``TETRARCH_TELEMETRY_ROWS`` rows wait for it, the
batches past that are dropped and counted) and ``tables`` (the store as Arrow IPC streams, answered on a
thread). The client keeps a store of its own for its own events (it may run on a host with
no agent). :func:`query` asks every host agent for its tables with :func:`~._ask.ask`, each
within one bound, and runs the SQL over their union and the client's store; a host that does
not answer in time is named in the result's ``missing``.

Folders: the client makes one per run, ``<TETRARCH_TELEMETRY_DIR>/<run>/``, passes it to the
processes it starts (:func:`telemetry_env`), and each store writes to
``<run>/<host>-<role>-<pid>/``.
"""

from __future__ import annotations

import os
import pickle
import queue
import re
import shutil  # at the top: the client's exit prunes old runs (see plumbing/_dirs on imports at exit)
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..._config import TELEMETRY_DIR, TELEMETRY_DISK_MB, TELEMETRY_ROWS, TELEMETRY_STORE
from ..._log import get_logger
from ..._telemetry._forward import Recorder
from ..._telemetry._tables import hostname
from ..plumbing._dirs import user_dir
from ..router._router import PeerUnreachable, Router
from ..values import _wire
from ._ask import Request, ask

if TYPE_CHECKING:  # the store (and pathlib) load with the first row kept: not at a host agent's start
    from ..._telemetry._store import TelemetryStore

__all__ = ["ANSWER_MB", "KEEP_RUNS", "SVC_TELEMETRY", "QueryResult", "Telemetry", "TelemetryHandle", "prune_runs",
           "query", "run_folder", "start_telemetry", "telemetry_env"]

_log = get_logger("telemetry")

SVC_TELEMETRY = "telemetry"
#: Megabytes of Parquet files one host adds to its answer at most (memory's rows always come).
ANSWER_MB = 64
#: Runs' folders a telemetry folder keeps: at a client's end, the oldest past these are deleted.
KEEP_RUNS = 20
_RUN_NAME = re.compile(r"^\d{8}T\d{6}-.+-\d+$")

_run_dir: list[str] = []


def default_base() -> str:
    """Where stores write when ``TETRARCH_TELEMETRY_DIR`` is empty."""
    return str(user_dir("telemetry"))


def run_folder(role: str) -> str:
    """This process's run folder: the client makes ``<dir>/<run>``; the processes it starts are
    told theirs (``TETRARCH_TELEMETRY_DIR``, :func:`telemetry_env`)."""
    if _run_dir:
        return _run_dir[0]
    base = TELEMETRY_DIR() or default_base()
    if role == "client":
        base = os.path.join(base, f"{time.strftime('%Y%m%dT%H%M%S')}-{hostname()}-{os.getpid()}")
    _run_dir.append(base)
    return base


def prune_runs(base: str, keep: int = KEEP_RUNS) -> list[str]:
    """Delete the oldest run folders of ``base`` past ``keep`` (only folders named as runs are);
    the deleted ones."""
    try:
        runs = [e for e in os.scandir(base) if e.is_dir(follow_symlinks=False) and _RUN_NAME.match(e.name)]
    except OSError:
        return []
    runs.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime)
    gone = []
    for entry in runs[:max(0, len(runs) - keep)]:
        shutil.rmtree(entry.path, ignore_errors=True)
        gone.append(entry.path)
    return gone


def telemetry_env() -> dict[str, str]:
    """What a process this one starts needs to write into this run's folder."""
    return {TELEMETRY_DIR.env: _run_dir[0]} if _run_dir else {}


class TelemetryHandle:
    """One process's telemetry: its recorder, and its store (a host agent's, the client's), made
    when first needed from ``(folder, rows, disk MB)``."""

    def __init__(self, recorder: Recorder, store: tuple[str, int, float] | None, prune: str | None = None) -> None:
        """``prune``: the telemetry folder whose oldest runs :meth:`close` deletes (the client's)."""
        self.recorder = recorder
        self._prune = prune
        self._store_args = store
        self._store: TelemetryStore | None = None
        self._made = threading.Lock()  # making the store; the count of rows waiting for it
        #: Rows from procs dropped because too many waited for the store.
        self.dropped = 0
        self._queue: queue.SimpleQueue[dict[str, list[tuple]] | None] = queue.SimpleQueue()
        self._queued = 0
        self._ingest: threading.Thread | None = None

    @property
    def store(self) -> TelemetryStore | None:
        """The store (None in a proc, whose rows go to its host agent's)."""
        if self._store is None and self._store_args is not None:
            from pathlib import Path

            from ..._telemetry._store import TelemetryStore

            with self._made:
                if self._store is None:
                    folder, rows, disk_mb = self._store_args
                    self._store = TelemetryStore(Path(folder), rows, disk_mb)
        return self._store

    def take(self, batch: dict[str, list[tuple]]) -> None:
        """Keep ``batch`` in the store (the store's own thread; never the caller's)."""
        if self._store_args is None:
            return
        n = sum(len(rows) for rows in batch.values())
        with self._made:
            if self._queued + n > max(self._store_args[1], 1024):  # rows waiting: at most a store's worth
                self.dropped += n
                return
            self._queued += n
        self._queue.put(batch)
        if self._ingest is None:
            self._ingest = threading.Thread(target=self._run, name="tetrarch-telemetry-store", daemon=True)
            self._ingest.start()

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            self.keep(batch)
            with self._made:
                self._queued -= sum(len(rows) for rows in batch.values())

    def keep(self, batch: dict[str, list[tuple]]) -> None:
        """Add ``batch`` to the store now (the calling thread)."""
        if self.store is None:
            return
        for table, rows in batch.items():
            try:
                self.store.add(table, rows)
            except KeyError:
                continue

    def close(self) -> None:
        """Flush the recorder, then every row the store holds to disk (at this process's end)."""
        self.recorder.close()
        if self._ingest is not None:
            self._queue.put(None)
            self._ingest.join(5.0)
        while not self._queue.empty():  # what the thread had not taken when it was told to end
            batch = self._queue.get_nowait()
            if batch is not None:
                self.keep(batch)
        if self._store is not None:  # never made: nothing to write
            self._store.flush()
        if self._prune is not None:
            prune_runs(self._prune)

    # -- the ``telemetry`` service (a host agent's) -----------------------------------
    def service(self, router: Router, hdr: _wire.SysHeader, payload: list) -> None:
        """``telemetry`` messages (I/O thread): ``rows`` kept, ``tables`` answered on a thread."""
        if hdr.op == "rows" and payload:
            try:
                batch = pickle.loads(payload[0])
            except Exception:  # noqa: BLE001 - a malformed batch is dropped
                return
            self.take(batch)
        elif hdr.op == "tables":
            threading.Thread(target=self._answer, args=(router, hdr.reply_addr, hdr.reply_port), daemon=True,
                             name="tetrarch-telemetry-query").start()

    def _answer(self, router: Router, raddr: str | None, rport: int | None) -> None:
        from ..._telemetry._query import to_ipc
        from ..._telemetry._store import release_memory

        try:
            assert self.store is not None
            self.recorder.flush()  # this agent's own rows of the last second
            value: Any = {"host": hostname(), "tables": to_ipc(self.store.tables(ANSWER_MB << 20))}
            status = _wire.OK
        except Exception as exc:  # noqa: BLE001 - the asker gets the reason (no pyarrow here, ...)
            value, status = {"host": hostname(), "error": f"{type(exc).__name__}: {exc}"}, _wire.OK
        router.reply(raddr, rport, 0, status, value)
        del value
        release_memory()


def start_telemetry(role: str, router: Router, host_agent: str | None) -> TelemetryHandle | None:
    """This process's telemetry (None while ``TETRARCH_TELEMETRY_STORE=0``): a host agent's or
    the client's store with its recorder; a proc's recorder, sending to ``host_agent``."""
    try:
        if not TELEMETRY_STORE():
            return None
        rows, disk_mb = TELEMETRY_ROWS(), TELEMETRY_DISK_MB()
    except ValueError as exc:
        _log.warning("the telemetry store is off: %s", exc)
        return None
    if role == "proc":
        return TelemetryHandle(Recorder(_sender(router, host_agent)).start(), None)
    folder = os.path.join(run_folder(role), f"{hostname()}-{'client' if role == 'client' else 'agent'}-{os.getpid()}")
    run = run_folder(role)
    handle = TelemetryHandle(Recorder(lambda batch: None), (folder, rows, disk_mb),
                             prune=os.path.dirname(run) if role == "client" else None)
    handle.recorder.sink = handle.keep  # on the recorder's thread: a rotation may write a file
    handle.recorder.start()
    if role != "client":
        router.add_service(SVC_TELEMETRY, lambda hdr, payload, _conn: handle.service(router, hdr, payload))
    return handle


def _sender(router: Router, host_agent: str | None) -> Any:
    def send(batch: dict[str, list[tuple]]) -> None:
        if host_agent is None:
            raise PeerUnreachable("this proc has no host agent")
        router.send(host_agent, [_wire.sys_header(SVC_TELEMETRY, "rows"), pickle.dumps(batch, 5)])

    return send


class QueryResult(NamedTuple):
    """A query's answer, and the hosts that did not give theirs."""

    table: Any  #: ``pyarrow.Table``
    missing: list[str]  #: host agents (addresses, with the reason) whose rows are not in it


def query(router: Router, agents: Iterable[str], local: TelemetryHandle | None, sql: str,
          timeout: float = 10.0) -> QueryResult:
    """Run ``sql`` over the tables of the host agents at ``agents`` and of ``local``.

    Each host has ``timeout`` seconds to answer (all are asked at once).

    Raises:
        TelemetryQueryError: the statement fails (DuckDB's message), or the ``sql`` extra is missing.
    """
    from ..._telemetry._query import from_ipc, run_sql

    addresses = list(dict.fromkeys(agents))
    answers = ask(router, [Request(a, SVC_TELEMETRY, "tables") for a in addresses], timeout)
    parts: list[dict[str, Any]] = []
    missing: list[str] = []
    for address, answer in zip(addresses, answers, strict=True):
        value = answer.value if answer.ok else None
        if not isinstance(value, dict) or "tables" not in value:
            why = value.get("error") if isinstance(value, dict) else f"no answer within {timeout:g} s"
            missing.append(f"{address} ({why})")
            continue
        parts.append(from_ipc(value["tables"]))
    if local is not None:
        local.recorder.flush()
        if local.store is not None:
            parts.append(local.store.tables(ANSWER_MB << 20))
    return QueryResult(run_sql(sql, parts), missing)


class Telemetry:
    """SQL over the telemetry of a job's hosts and of this client (``job.telemetry``)."""

    def __init__(self, router: Callable[[], Router], agents: Callable[[], list[str]],
                 local: Callable[[], TelemetryHandle | None]) -> None:
        self._router = router
        self._agents = agents
        self._local = local
        #: The hosts the last query got no rows from (address and reason), empty when all answered.
        self.missing: list[str] = []

    def query(self, sql: str, timeout: float = 10.0) -> Any:
        """Run ``sql`` over every host's tables (docs/telemetry.md lists them); a ``pyarrow.Table``.

        Each host has ``timeout`` seconds to answer; one that does not is left out, named in
        :attr:`missing` and in a ``RuntimeWarning``.

        Raises:
            TelemetryQueryError: the statement fails (its message is DuckDB's), or the ``sql``
                extra is not installed (``pip install "tetrarch[sql]"``).
        """
        result = query(self._router(), self._agents(), self._local(), sql, timeout)
        self.missing = result.missing
        if result.missing:
            warnings.warn(f"telemetry query: no rows from {len(result.missing)} host(s): "
                          f"{'; '.join(result.missing)}", RuntimeWarning, stacklevel=2)
        return result.table
