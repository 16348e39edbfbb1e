"""SQL over telemetry tables: an in-memory DuckDB over Arrow, one per query.

The stored tables of every host (:data:`~._tables.COLUMNS`) are registered as their union,
the views of :data:`~._tables.VIEWS` are made over them, and the statement runs there. The
connection is in memory, dropped after the query, and has no access to files, the network or
extensions: a statement that writes changes nothing anyone else sees, and none reads or writes a
file (``COPY ... TO``, ``read_csv``, ``ATTACH`` fail with DuckDB's permission error). Tables
cross processes as Arrow IPC streams (:func:`to_ipc`, :func:`from_ipc`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import TelemetryQueryError
from ._store import arrow_table
from ._tables import STORED, VIEWS

__all__ = ["as_json", "from_ipc", "run_sql", "to_ipc"]

_HINT = 'the sql extra is missing: pip install "tetrarch[sql]" (DuckDB and pyarrow)'


def to_ipc(tables: Mapping[str, Sequence[Any]]) -> dict[str, bytes]:
    """Each table's pieces as one Arrow IPC stream (concatenated)."""
    import pyarrow as pa

    out = {}
    for name, pieces in tables.items():
        table = pa.concat_tables(list(pieces)) if pieces else arrow_table(name, [])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        out[name] = sink.getvalue().to_pybytes()
    return out


def from_ipc(streams: Mapping[str, bytes]) -> dict[str, Any]:
    """:func:`to_ipc`'s streams back as ``pyarrow`` tables."""
    import pyarrow as pa

    return {name: pa.ipc.open_stream(data).read_all() for name, data in streams.items()}


def run_sql(sql: str, parts: Sequence[Mapping[str, Any]]) -> Any:
    """Run ``sql`` over the union of ``parts`` (each a mapping of table name to a ``pyarrow.Table``
    or a list of them); the answer as a ``pyarrow.Table``.

    Raises:
        TelemetryQueryError: the statement is not valid, or fails (DuckDB's message), or the
            ``sql`` extra is not installed.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise TelemetryQueryError("a telemetry query needs an SQL statement, e.g. 'SELECT * FROM events LIMIT 10'")
    try:
        import duckdb
        import pyarrow as pa
    except ImportError as exc:
        raise TelemetryQueryError(f"{_HINT} ({exc})") from exc
    merged: dict[str, list[Any]] = {t: [] for t in STORED}
    for part in parts:
        for name, value in part.items():
            if name in merged:
                merged[name].extend(value if isinstance(value, (list, tuple)) else [value])
    # No file, network or extension access: the tables are handed over as Arrow, and a query (also one
    # through the admin API) can neither read this machine's files nor write any.
    con = duckdb.connect(":memory:", config={"enable_external_access": False, "autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False})
    try:
        for name, pieces in merged.items():
            table = pa.concat_tables(pieces) if pieces else arrow_table(name, [])
            con.register(f"_t_{name}", table)
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM _t_{name}")
        for name, body in VIEWS:
            con.execute(f"CREATE VIEW {name} AS {body}")
        try:
            rel = con.sql(sql)
            if rel is None:  # a statement with no result (it changed this query's own database only)
                return pa.table({})
            fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
            return fetch()
        except duckdb.Error as exc:
            raise TelemetryQueryError(f"the telemetry query failed: {exc}") from None
    finally:
        con.close()


def as_json(table: Any, missing: Sequence[str] = ()) -> dict[str, Any]:
    """A query's answer as JSON data: ``{"columns", "rows", "missing"}`` (a NaN or an infinity becomes
    None; a value JSON lacks, such as a timestamp, its text)."""
    columns = list(table.column_names)
    rows = []
    for row in table.to_pylist():
        out = []
        for name in columns:
            value = row[name]
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            elif value is not None and not isinstance(value, (str, int, float, bool, list, dict)):
                value = str(value)
            out.append(value)
        rows.append(out)
    return {"columns": columns, "rows": rows, "missing": list(missing)}
