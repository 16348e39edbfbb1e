"""One process's bounded, rotating store of telemetry rows (a host agent's, or the client's own).

Per table, the newest ``TETRARCH_TELEMETRY_ROWS`` rows stay in memory as tuples. Past that,
the oldest quarter of them is written to a Parquet file in the store's folder
(``<table>-<seq>.parquet``), and files past ``TETRARCH_TELEMETRY_DISK_MB`` (all tables
together) are deleted oldest first. :meth:`TelemetryStore.flush` writes what memory holds
at the end of a job as ``<table>-<seq>.json`` (a JSON array of rows: no pyarrow at exit),
so a finished job's folder answers queries (:func:`read_folder`).

pyarrow is imported on the first rotation or query, never before: a host agent that
records a few events and is never asked pays nothing for it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

from ._tables import COLUMNS, STORED

__all__ = ["TelemetryStore", "arrow_table", "read_folder", "release_memory"]

_ARROW = {"DOUBLE": "float64", "VARCHAR": "string", "BIGINT": "int64", "BOOLEAN": "bool_"}


def release_memory() -> None:
    """Give the memory Arrow's pool holds unused back to the OS (after a rotation or an answer: a
    host agent is long-lived and its pool would otherwise keep its largest answer's pages)."""
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        try:
            pa.default_memory_pool().release_unused()
        except Exception:  # noqa: BLE001 - an older pyarrow: nothing to release
            pass


def arrow_schema(table: str) -> Any:
    """The Arrow schema of the stored table ``table``."""
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, _ARROW[kind])()) for name, kind in COLUMNS[table]])


def arrow_table(table: str, rows: list[tuple]) -> Any:
    """``rows`` of ``table`` as a ``pyarrow.Table`` (an empty one for no rows)."""
    import pyarrow as pa

    schema = arrow_schema(table)
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.table([pa.array(col, type=field.type) for col, field in zip(columns, schema, strict=True)],
                    schema=schema)


def _seq(path: Path) -> int:
    try:
        return int(path.name.rsplit("-", 1)[-1].split(".", 1)[0])
    except ValueError:
        return 0


def _files(folder: Path) -> list[Path]:
    """The files of ``folder``'s store (Parquet and JSON), oldest first."""
    try:
        found = [p for p in folder.iterdir() if p.suffix in (".parquet", ".json") and "-" in p.name]
    except OSError:
        return []
    return sorted(found, key=_seq)


def _read(path: Path) -> tuple[str, Any]:
    """``(table, pyarrow table)`` of one stored file.

    Raises:
        Exception: the file is cut short, or not a store's file.
    """
    table = path.name.rsplit("-", 1)[0]
    if path.suffix == ".json":
        with open(path, encoding="utf-8") as f:
            return table, arrow_table(table, [tuple(r) for r in json.load(f)])
    import pyarrow.parquet as pq

    return table, pq.read_table(path, schema=arrow_schema(table))


def read_folder(folder: str | os.PathLike[str]) -> dict[str, list[Any]]:
    """Every stored table's Parquet files under ``folder`` (searched recursively), read.

    Raises:
        FileNotFoundError: ``folder`` does not exist.
    """
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"no telemetry folder at {root}")
    out: dict[str, list[Any]] = {t: [] for t in STORED}
    for path in sorted(root.rglob("*-*.*")):
        if path.suffix not in (".parquet", ".json") or path.name.rsplit("-", 1)[0] not in out:
            continue
        try:
            table, data = _read(path)
        except Exception:  # noqa: BLE001 - a file cut short by a killed host is skipped
            continue
        out[table].append(data)
    return out


class TelemetryStore:
    """The rows of one process's store; thread-safe. ``folder`` None: memory only."""

    def __init__(self, folder: Path | None, rows: int, disk_mb: float) -> None:
        self.folder = folder
        self.limit = max(4, rows)
        self.disk_bytes = int(disk_mb * (1 << 20))
        self._mem: dict[str, deque[tuple]] = {t: deque() for t in STORED}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._seq = 0
        #: Rows dropped: rotated with no disk to go to, or sent by a process whose buffer was full.
        self.dropped = 0
        #: Rows written to Parquet so far, and files deleted to keep within the disk bound.
        self.rotated = 0
        self.deleted_files = 0

    def add(self, table: str, rows: list[tuple]) -> None:
        """Keep ``rows`` of ``table``; the oldest rotate to disk when memory holds too many.

        Raises:
            KeyError: ``table`` is not a stored table.
        """
        out: list[tuple] = []
        with self._lock:
            mem = self._mem[table]
            mem.extend(rows)
            if len(mem) > self.limit:
                n = len(mem) - self.limit + self.limit // 4
                out = [mem.popleft() for _ in range(n)]
        if out:
            self._write(table, out)

    def counts(self) -> dict[str, int]:
        """Rows in memory per table."""
        with self._lock:
            return {t: len(m) for t, m in self._mem.items()}

    def disk_usage(self) -> int:
        """Bytes of this store's Parquet files."""
        return sum(p.stat().st_size for p in _files(self.folder)) if self.folder is not None else 0

    def tables(self, max_bytes: int | None = None) -> dict[str, list[Any]]:
        """Every table as ``pyarrow`` tables: memory's rows, then the Parquet files, newest first
        while their size stays under ``max_bytes`` (None: all of them)."""
        with self._lock:
            snap = {t: list(m) for t, m in self._mem.items()}
        out = {t: [arrow_table(t, rows)] for t, rows in snap.items()}
        if self.folder is None:
            return out
        budget = max_bytes if max_bytes is not None else 1 << 62
        with self._write_lock:
            for path in reversed(_files(self.folder)):
                try:
                    size = path.stat().st_size
                    if size > budget or path.name.rsplit("-", 1)[0] not in out:
                        continue
                    table, data = _read(path)
                    out[table].append(data)
                    budget -= size
                except Exception:  # noqa: BLE001 - deleted meanwhile, or cut short
                    continue
        return out

    def flush(self) -> None:
        """Write every row held in memory to disk as JSON (a no-op without a folder)."""
        if self.folder is None:
            return
        for table in STORED:
            with self._lock:
                rows = list(self._mem[table])
                self._mem[table].clear()
            if rows:
                self._write(table, rows, parquet=False)

    def _write(self, table: str, rows: list[tuple], parquet: bool = True) -> None:
        """Write ``rows`` as one file, made in memory first: the oldest files go before it is
        written, so the folder never holds more than the disk bound, not even while writing."""
        if self.folder is None or self.disk_bytes <= 0:
            self.dropped += len(rows)
            return
        with self._write_lock:
            try:
                data = _encode(table, rows, parquet)
                if len(data) > self.disk_bytes:
                    raise ValueError("one file would pass the disk bound")
                self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._make_room(len(data))
                if self._seq == 0:  # a folder used before (a worker's next session): after its files
                    self._seq = max((_seq(p) for p in _files(self.folder)), default=0)
                self._seq += 1
                path = self.folder / f"{table}-{self._seq:08d}.{'parquet' if parquet else 'json'}"
                with open(path, "wb") as f:
                    f.write(data)
                self.rotated += len(rows)
            except Exception:  # noqa: BLE001 - a full or read-only disk loses rows, never the host
                self.dropped += len(rows)

    def _make_room(self, size: int) -> None:
        """Delete the oldest files until ``size`` more bytes fit within the disk bound."""
        assert self.folder is not None
        files = _files(self.folder)
        sizes = [p.stat().st_size for p in files]
        total = sum(sizes) + size
        for path, old in zip(files, sizes, strict=True):
            if total <= self.disk_bytes:
                break
            try:
                path.unlink()
                self.deleted_files += 1
            except OSError:
                pass
            total -= old


def _encode(table: str, rows: list[tuple], parquet: bool) -> bytes:
    """``rows`` as a Parquet file's bytes (zstd), or as a JSON array."""
    if not parquet:
        return json.dumps(rows, separators=(",", ":")).encode()
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(arrow_table(table, rows), sink, compression="zstd")
    data: bytes = sink.getvalue().to_pybytes()
    del sink
    release_memory()
    return data
