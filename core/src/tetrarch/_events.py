"""Structured lifecycle events: what happened to hosts, procs, meshes and actors, as records.

Each event is an INFO record on a logger of the ``tetrarch.events`` tree
(``tetrarch.events.proc``, ``.host``, ``.mesh``, ``.actor``), separate from tetrarch's
diagnostics and from user output, carrying a ``tetrarch_event`` dict whose fields
:data:`SCHEMA` documents (docs/telemetry.md). They cost nothing until something listens:
:func:`emit` builds nothing when its logger is not enabled for INFO.

An application reads them with its own logging handlers, or asks for a JSON line per event
on stderr with ``TETRARCH_EVENT_LOG=json`` (``text`` for a readable line); procs inherit the
setting, and their lines reach the client's terminal with their output. :class:`JsonFormatter`
formats any record, an event or not, as one JSON object.

A failure cascade is marked: each ``actor.failed`` event says whether it is the cascade's
``root_cause`` (the first failure, which caused the others) and names that root.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ._config import EVENT_LOG
from ._telemetry import notify

__all__ = ["LISTENERS", "LOGGER", "SCHEMA", "JsonFormatter", "emit"]

#: The root of the events' logger tree.
LOGGER = "tetrarch.events"

#: Every event and its fields (besides ``event``, ``time`` and ``pid``, the emitting process's).
SCHEMA: dict[str, dict[str, str]] = {
    "host.ready": {"ident": "allocation id / host index", "address": "its tetrarch address", "host": "host name",
                   "host_pid": "the host agent's pid"},
    "host.exited": {"ident": "as above", "returncode": "exit status (negative: the signal)", "why": "how it ended"},
    "proc.ready": {"ident": "the proc's id", "name": "mesh and coordinates", "address": "its tetrarch address",
                   "host": "host name", "proc_pid": "its pid"},
    "proc.exited": {"ident": "as above", "name": "as above", "returncode": "exit status (negative: the signal)",
                    "why": "how it ended"},
    "mesh.spawned": {"mesh": "the actor mesh's name", "key": "its key", "class": "module.Class", "actors": "how many",
                     "owner": "client, or the owning actor"},
    "mesh.stopped": {"mesh": "as above", "key": "as above"},
    "actor.failed": {"mesh": "its mesh's name", "key": "the mesh's key", "rank": "its rank", "actor": "display name",
                     "class": "module.Class", "endpoint": "what it ran", "host": "host name",
                     "actor_pid": "its proc's pid", "cause": "what happened",
                     "root_cause": "true for the first failure of a cascade (the one that caused the others)",
                     "root": "that first failure: {actor, mesh, rank, cause}",
                     "chain": "the earlier failures of the cascade, root first: [{actor, mesh, rank, cause}]"},
}

_configured = [False]

#: Called with every event's record (its dict) whether or not a logger is enabled for it: the
#: telemetry store's recorder. Each must be quick and must not raise.
LISTENERS: list[Callable[[dict[str, Any]], None]] = []


class JsonFormatter(logging.Formatter):
    """One JSON object per record: an event's fields, or ``message`` for any other record."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "tetrarch_event", None)
        if event is not None:
            return json.dumps(event, default=str)
        out = {"time": record.created, "level": record.levelname, "logger": record.name,
               "message": record.getMessage(), "pid": record.process}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "tetrarch_event", None)
        if event is None:
            return record.getMessage()
        fields = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("event", "time"))
        return f"tetrarch event {event['event']}: {fields}"


def _configure() -> None:
    """Attach the stderr handler ``TETRARCH_EVENT_LOG`` asks for (once per process)."""
    _configured[0] = True
    try:
        mode = EVENT_LOG()
    except ValueError:
        return
    if mode not in ("json", "text"):
        if mode:
            logging.getLogger("tetrarch.events").warning(
                "TETRARCH_EVENT_LOG=%r is not a format: use json or text (events stay with your own handlers)", mode)
        return
    logger = logging.getLogger(LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if mode == "json" else _TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def emit(event: str, **fields: Any) -> None:
    """Log the lifecycle event ``event`` (a key of :data:`SCHEMA`) with ``fields``; never raises."""
    if not _configured[0]:
        _configure()
    logger = logging.getLogger(f"{LOGGER}.{event.split('.', 1)[0]}")
    enabled = logger.isEnabledFor(logging.INFO)
    if not (enabled or LISTENERS):
        return
    record = {"event": event, "time": time.time(), "pid": os.getpid(), **fields}
    notify(LISTENERS, record)
    if not enabled:
        return
    try:
        logger.info("%s %s", event, fields, extra={"tetrarch_event": record})
    except Exception:  # noqa: BLE001 - telemetry never breaks the program
        pass
