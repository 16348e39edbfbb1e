"""Metrics through OpenTelemetry: what each process's actors did, read when the exporter asks.

With ``TETRARCH_METRICS=1`` every process (client, procs) starts an OpenTelemetry
``MeterProvider`` whose periodic reader exports through the standard OTLP exporter, configured
by the standard ``OTEL_*`` variables (endpoint, protocol, headers, interval). The instruments
are *observable*: their callbacks read, at export time, the counters the actors keep anyway
(:mod:`._stats`) and the process's own resource usage, so a call pays nothing more for them.

Instruments (attributes in brackets):

* ``tetrarch.actor.calls`` (counter, ``{call}``) [mesh, rank, class, endpoint]
* ``tetrarch.actor.handler_time`` (counter, ``s``) [mesh, rank, class, endpoint]
* ``tetrarch.actor.mailbox`` (gauge, ``{message}``) [mesh, rank, class]
* ``tetrarch.proc.memory`` (gauge, ``By``: resident set) and ``tetrarch.proc.cpu_time`` (counter, ``s``)

The resource says ``service.name`` (``OTEL_SERVICE_NAME``, default ``tetrarch``), the process's
role and name, host and pid. A collector that is down or slow never holds the program up:
exports run on the reader's thread, and at exit the last one gets :data:`FLUSH_TIMEOUT_MS`.
"""

from __future__ import annotations

import atexit
import os
import resource
import socket
from collections.abc import Callable, Iterable
from typing import Any

from ..._log import get_logger
from ._stats import start_counting

__all__ = ["FLUSH_TIMEOUT_MS", "start_metrics"]

_log = get_logger("metrics")
#: Milliseconds the exit's last export may take.
FLUSH_TIMEOUT_MS = 1000
_started: list[Any] = []


def _rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def start_metrics(role: str, name: str, runners: Callable[[], Iterable[Any]]) -> bool:
    """Export this process's metrics through OTLP; whether it started (once per process).

    ``runners()`` gives the process's actor runners when the exporter asks. Missing
    OpenTelemetry packages or a malformed ``OTEL_*`` setting give one warning, never an error.
    """
    if _started:
        return True
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.metrics import CallbackOptions, Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
    except ImportError as exc:
        _log.warning("TETRARCH_METRICS is on but OpenTelemetry is missing (%s): pip install \"tetrarch[otel]\"", exc)
        return False
    try:
        resource_ = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "tetrarch"),
                                     "tetrarch.role": role, "tetrarch.process": name,
                                     "host.name": socket.gethostname(), "process.pid": os.getpid()})
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    except Exception as exc:  # noqa: BLE001 - a malformed OTEL_* setting: one warning, no metrics
        _log.warning("TETRARCH_METRICS: the OTLP exporter could not be set up from the OTEL_* settings: %s", exc)
        return False
    provider = MeterProvider(resource=resource_, metric_readers=[reader])
    meter = provider.get_meter("tetrarch")
    start_counting(runners())

    def actors() -> list[tuple[dict[str, Any], Any]]:
        out = []
        for r in list(runners()):
            cls = r.cls
            attrs = {"mesh": r.instance.name, "rank": r.instance.rank.rank,
                     "class": f"{cls.__module__}.{cls.__qualname__}"}
            out.append((attrs, r))
        return out

    def calls(_options: CallbackOptions) -> list[Observation]:
        return [Observation(row[0], {**attrs, "endpoint": ep}) for attrs, r in actors() if r.stats is not None
                for ep, row in list(r.stats.by_endpoint.items())]

    def handler_time(_options: CallbackOptions) -> list[Observation]:
        return [Observation(row[1], {**attrs, "endpoint": ep}) for attrs, r in actors() if r.stats is not None
                for ep, row in list(r.stats.by_endpoint.items())]

    def mailbox(_options: CallbackOptions) -> list[Observation]:
        return [Observation(len(r._mailbox), attrs) for attrs, r in actors()]

    def memory(_options: CallbackOptions) -> list[Observation]:
        return [Observation(_rss())]

    def cpu(_options: CallbackOptions) -> list[Observation]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return [Observation(usage.ru_utime + usage.ru_stime)]

    meter.create_observable_counter("tetrarch.actor.calls", [calls], unit="{call}",
                                    description="calls an actor's endpoint handled")
    meter.create_observable_counter("tetrarch.actor.handler_time", [handler_time], unit="s",
                                    description="seconds an actor spent in an endpoint")
    meter.create_observable_gauge("tetrarch.actor.mailbox", [mailbox], unit="{message}",
                                  description="messages waiting for an actor")
    meter.create_observable_gauge("tetrarch.proc.memory", [memory], unit="By", description="resident memory")
    meter.create_observable_counter("tetrarch.proc.cpu_time", [cpu], unit="s", description="CPU time")
    _started.append(provider)
    atexit.register(provider.shutdown, timeout_millis=FLUSH_TIMEOUT_MS)
    return True
