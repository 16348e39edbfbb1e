"""The tables of a job's telemetry store: their columns, and the rows made from each record.

Four tables are stored (rows are plain tuples until a query or a rotation turns them into
Arrow): ``events`` (every lifecycle event), ``actor_status_events`` (``actor.failed``, with
its cascade), ``spans`` and ``metric_points``. Three more are views over them, made by the
query engine: ``actors``, ``meshes`` and ``messages`` (:data:`VIEWS`). Every row carries
the ``host`` and ``pid`` of the process that recorded it. docs/telemetry.md lists them.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from . import SpanRecord

__all__ = ["COLUMNS", "STORED", "VIEWS", "event_rows", "metric_rows", "span_row"]

#: Per stored table, its columns as ``(name, type)``; types are DuckDB's names (and Arrow's, below).
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "events": (("time", "DOUBLE"), ("event", "VARCHAR"), ("host", "VARCHAR"), ("pid", "BIGINT"),
               ("mesh", "VARCHAR"), ("key", "VARCHAR"), ("rank", "BIGINT"), ("actor", "VARCHAR"),
               ("class", "VARCHAR"), ("ident", "VARCHAR"), ("fields", "VARCHAR")),
    "actor_status_events": (("time", "DOUBLE"), ("status", "VARCHAR"), ("host", "VARCHAR"), ("pid", "BIGINT"),
                            ("mesh", "VARCHAR"), ("key", "VARCHAR"), ("rank", "BIGINT"), ("actor", "VARCHAR"),
                            ("class", "VARCHAR"), ("endpoint", "VARCHAR"), ("actor_host", "VARCHAR"),
                            ("actor_pid", "BIGINT"), ("cause", "VARCHAR"), ("root_cause", "BOOLEAN"),
                            ("root_actor", "VARCHAR"), ("root_mesh", "VARCHAR"), ("root_rank", "BIGINT"),
                            ("chain", "VARCHAR")),
    "spans": (("trace_id", "VARCHAR"), ("span_id", "VARCHAR"), ("parent_id", "VARCHAR"), ("name", "VARCHAR"),
              ("start_ns", "BIGINT"), ("end_ns", "BIGINT"), ("duration_ms", "DOUBLE"), ("host", "VARCHAR"),
              ("pid", "BIGINT"), ("tid", "BIGINT"), ("mesh", "VARCHAR"), ("endpoint", "VARCHAR"),
              ("rank", "BIGINT"), ("status", "VARCHAR"), ("attrs", "VARCHAR")),
    "metric_points": (("time", "DOUBLE"), ("name", "VARCHAR"), ("attributes", "VARCHAR"), ("value", "DOUBLE"),
                      ("host", "VARCHAR"), ("pid", "BIGINT")),
}
STORED = tuple(COLUMNS)

#: The tables made at query time from the stored ones (SQL views, in this order).
VIEWS: tuple[tuple[str, str], ...] = (
    ("meshes", """
        SELECT s.key, s.mesh AS name, s.class, CAST(json_extract(s.fields, '$.actors') AS BIGINT) AS actors,
               json_extract_string(s.fields, '$.owner') AS owner, s.host, s.pid, s.time AS spawned,
               t.time AS stopped,
               CASE WHEN f.key IS NOT NULL THEN 'failed' WHEN t.key IS NOT NULL THEN 'stopped'
                    ELSE 'running' END AS state
        FROM (SELECT * FROM events WHERE event = 'mesh.spawned') s
        LEFT JOIN (SELECT key, max(time) AS time FROM events WHERE event = 'mesh.stopped' GROUP BY key) t
               ON t.key = s.key
        LEFT JOIN (SELECT DISTINCT key FROM actor_status_events) f ON f.key = s.key"""),
    ("actors", """
        SELECT m.key, m.name AS mesh, r.rank, m.class, a.actor, a.actor_host AS host, a.actor_pid AS pid,
               CASE WHEN a.rank IS NOT NULL THEN 'failed' WHEN m.state = 'stopped' THEN 'stopped'
                    ELSE 'running' END AS state,
               a.cause
        FROM meshes m, range(coalesce(m.actors, 0)) r(rank)
        LEFT JOIN (SELECT DISTINCT ON (key, rank) * FROM actor_status_events ORDER BY key, rank, time) a
               ON a.key = m.key AND a.rank = r.rank"""),
    ("messages", """
        SELECT r.trace_id, r.start_ns / 1e9 AS time, s.host AS sender_host, s.pid AS sender_pid,
               r.host AS receiver_host, r.pid AS receiver_pid, coalesce(r.mesh, s.mesh) AS mesh,
               coalesce(r.endpoint, s.endpoint) AS endpoint, r.rank,
               coalesce(s.status, r.status) AS status,
               CASE WHEN s.start_ns IS NULL THEN NULL ELSE (r.start_ns - s.start_ns) / 1e6 END AS delivery_ms,
               CAST(json_extract(r.attrs, '$.bytes') AS BIGINT) AS bytes
        FROM (SELECT * FROM spans WHERE name = 'receive') r
        LEFT JOIN (SELECT * FROM spans WHERE name = 'send') s
               ON s.trace_id = r.trace_id AND s.span_id = r.parent_id"""),
)

_HOST = [""]


def hostname() -> str:
    """This host's name, as rows say it."""
    if not _HOST[0]:
        _HOST[0] = socket.gethostname()
    return _HOST[0]


def _int(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))


def event_rows(record: dict[str, Any]) -> list[tuple[str, tuple]]:
    """The rows one lifecycle event (``_events.emit``'s dict) makes: ``(table, row)`` each."""
    fields = {k: v for k, v in record.items() if k not in ("event", "time", "pid")}
    event = str(record.get("event", ""))
    time_, pid = float(record.get("time") or 0.0), _int(record.get("pid")) or os.getpid()
    host = hostname()
    rows: list[tuple[str, tuple]] = [("events", (
        time_, event, host, pid, _str(fields.get("mesh")), _str(fields.get("key")), _int(fields.get("rank")),
        _str(fields.get("actor")), _str(fields.get("class")), _str(fields.get("ident")), _json(fields)))]
    if event == "actor.failed":
        given = fields.get("root")
        root: dict[str, Any] = given if isinstance(given, dict) else {}
        rows.append(("actor_status_events", (
            time_, "failed", host, pid, _str(fields.get("mesh")), _str(fields.get("key")), _int(fields.get("rank")),
            _str(fields.get("actor")), _str(fields.get("class")), _str(fields.get("endpoint")),
            _str(fields.get("host")), _int(fields.get("actor_pid")), _str(fields.get("cause")),
            bool(fields.get("root_cause")), _str(root.get("actor")), _str(root.get("mesh")), _int(root.get("rank")),
            _json(fields.get("chain") or []))))
    return rows


def _hex(value: int, width: int) -> str | None:
    return f"{value:0{width}x}" if value else None


def span_row(rec: SpanRecord) -> tuple:
    """The ``spans`` row of one finished span."""
    attrs = rec.attrs or {}
    return (_hex(rec.trace_id, 32), _hex(rec.span_id, 16), _hex(rec.parent_id, 16), rec.name, rec.start_ns,
            rec.end_ns, (rec.end_ns - rec.start_ns) / 1e6, hostname(), rec.pid, rec.tid, _str(attrs.get("mesh")),
            _str(attrs.get("endpoint")), _int(attrs.get("rank")), _str(attrs.get("status")), _json(attrs))


def metric_rows(metrics_data: Any) -> list[tuple]:
    """The ``metric_points`` rows of one OpenTelemetry ``MetricsData`` export (sums, gauges; a
    histogram gives its sum)."""
    rows = []
    host, pid = hostname(), os.getpid()
    for rm in getattr(metrics_data, "resource_metrics", ()):
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in getattr(metric.data, "data_points", ()):
                    value = getattr(point, "value", None)
                    if value is None:
                        value = getattr(point, "sum", None)
                    if value is None:
                        continue
                    rows.append((point.time_unix_nano / 1e9, metric.name, _json(dict(point.attributes or {})),
                                 float(value), host, pid))
    return rows
