"""The standard ``OTEL_*`` variables, checked once before OpenTelemetry reads them.

OpenTelemetry's SDK logs its own complaint about a malformed value each time it reads it, in
every process (a 16-proc job printed 34 lines for one bad interval), or silently falls back.
:func:`sanitize` checks the values tetrarch's exporters use, removes the malformed ones from
this process's environment, so the SDK takes its defaults and the processes this one starts
inherit the clean environment, and says what was wrong and how to fix it in one warning,
given by the client only (procs and host agents clean up in silence).
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

__all__ = ["problems", "sanitize"]

_NUMBERS = ("OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT",
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_BSP_SCHEDULE_DELAY",
            "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
              "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_HEADERS = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
              "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
_HEADER = re.compile(r"\s*[^=,\s]+\s*=[^,]*")
_sanitized: list[list[str]] = []


def problems(env: dict[str, str] | os._Environ[str] = os.environ) -> dict[str, str]:
    """The malformed ``OTEL_*`` values in ``env``: variable -> what is wrong and the fix."""
    out: dict[str, str] = {}
    for name in _NUMBERS:
        value = env.get(name)
        if value is not None and not _positive(value):
            out[name] = f"{name}={value!r} is not a positive number (milliseconds, or seconds for *_TIMEOUT)"
    for name in _ENDPOINTS:
        value = env.get(name)
        if value:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                out[name] = f"{name}={value!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:4318)"
    for name in _HEADERS:
        value = env.get(name)
        if value and not all(_HEADER.fullmatch(item) for item in value.split(",")):
            out[name] = f"{name}={value!r} is not a comma-separated list of key=value (URL-encode the values)"
    for name in _PROTOCOLS:
        value = env.get(name)
        if value and value != "http/protobuf":
            out[name] = (f"{name}={value!r}: tetrarch exports with OTLP over http/protobuf (point the endpoint at "
                         f"the collector's HTTP port, 4318 by default)")
    return out


def _positive(value: str) -> bool:
    try:
        return float(value) > 0
    except ValueError:
        return False


def sanitize(warn: bool) -> list[str]:
    """Remove this process's malformed ``OTEL_*`` variables (once per process); the messages of what was
    removed. ``warn``: the caller gives one warning with them (the client does; the others are silent)."""
    if _sanitized:
        return _sanitized[0]
    found = problems()
    for name in found:
        os.environ.pop(name, None)
    _sanitized.append(list(found.values()))
    if found and warn:
        from .._log import get_logger

        get_logger("telemetry").warning(
            "telemetry: ignoring malformed OpenTelemetry settings (the defaults apply, in every process): %s",
            "; ".join(found.values()))
    return _sanitized[0]
