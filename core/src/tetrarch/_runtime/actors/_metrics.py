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
import resource
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..._log import get_logger
from ..._telemetry import READER_HOOKS, counting_started, meter_started
from ..._telemetry._otel_env import sanitize
from ..._telemetry._otlp import DROPPED, FLUSH_TIMEOUT_MS, START_WAIT_S, counting_exporter, in_background, otel_resource
from ..plumbing._stop_guard import class_name
from ._introspect import rss_bytes
from ._stats import start_counting

__all__ = ["DROPPED", "FLUSH_TIMEOUT_MS", "METRIC_MODULES", "start_metrics", "track_actor"]

#: What :func:`start_metrics` imports (about 240 ms of CPU here, ``requests`` being what the exporter's
#: constructor imports): a host's zygote imports it once, before it forks procs that will start
#: metrics, instead of every proc after its fork.
METRIC_MODULES = ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "opentelemetry.metrics",
                  "opentelemetry.sdk.metrics", "opentelemetry.sdk.metrics.export", "opentelemetry.sdk.resources",
                  "requests")

_log = get_logger("metrics")
_started: list[Any] = []
#: The thread setting up the exporter (``start_metrics(background=True)``), if one was started.
_starting: list[threading.Thread] = []
#: Every actor of this process since metrics started: its attributes and counters (kept after it stops,
#: so a short-lived actor's calls are still exported, at the latest by the exit's last export).
_tracked: dict[tuple[str, int], tuple[dict[str, Any], Any]] = {}


def _attrs(runner: Any) -> dict[str, Any]:
    return {"mesh": runner.instance.name, "rank": runner.instance.rank.rank, "class": class_name(runner.cls)}


def track_actor(runner: Any) -> None:
    """Export ``runner``'s counters from now on, also once it stopped (a no-op while metrics are off)."""
    if _started and runner.stats is not None:
        _tracked[(runner.key, runner.instance.rank.rank)] = (_attrs(runner), runner.stats)


def start_metrics(role: str, name: str, runners: Callable[[], Iterable[Any]], *, background: bool = False) -> bool:
    """Export this process's metrics through OTLP; whether it started, or is starting (once per process).

    ``runners()`` gives the process's actor runners when the exporter asks. Missing
    OpenTelemetry packages or a malformed ``OTEL_*`` setting give one warning, never an error.
    With ``background``, counting starts now and the exporter is set up on a thread (its
    imports cost about 240 ms of CPU; a client launches its host agents meanwhile): what is
    counted meanwhile is exported with the rest, and the exit waits for it.
    """
    if _started or _starting:
        return True
    sanitize(warn=role == "client")  # now: the host agents launched meanwhile inherit the cleaned settings
    atexit.register(_at_exit)  # the last export is ours (the provider does not register its own)
    if not background:
        return _start(role, name, runners)
    counting_started()  # the counters the instruments will read start now
    start_counting(runners())
    _starting.append(in_background(lambda: _start(role, name, runners), "tetrarch-metrics-start"))
    return True


def _start(role: str, name: str, runners: Callable[[], Iterable[Any]]) -> bool:
    """:func:`start_metrics`'s exporter, meter and instruments; whether they started."""
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.metrics import CallbackOptions, Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import MetricExportResult, PeriodicExportingMetricReader
    except ImportError as exc:
        _log.warning("TETRARCH_METRICS is on but OpenTelemetry is missing (%s): pip install \"tetrarch[otel]\"", exc)
        return False
    try:
        resource_ = otel_resource(role, name)
        exporter = counting_exporter(OTLPMetricExporter, "metrics", MetricExportResult.SUCCESS)
        reader = PeriodicExportingMetricReader(exporter())
    except Exception as exc:  # noqa: BLE001 - a malformed OTEL_* setting: one warning, no metrics
        _log.warning("TETRARCH_METRICS: the OTLP exporter could not be set up from the OTEL_* settings: %s", exc)
        return False
    extra = []
    for make in READER_HOOKS:
        try:
            extra.append(make())
        except Exception as exc:  # noqa: BLE001 - one reader that cannot start leaves the others
            _log.warning("metrics: a reader could not start: %s", exc)
    provider = MeterProvider(resource=resource_, metric_readers=[reader, *extra], shutdown_on_exit=False)
    meter = provider.get_meter("tetrarch")
    start_counting(runners())
    _started.append(provider)

    for runner in list(runners()):
        track_actor(runner)

    def rows(column: int) -> list[Observation]:
        return [Observation(row[column], {**attrs, "endpoint": ep}) for attrs, stats in list(_tracked.values())
                for ep, row in list(stats.by_endpoint.items())]

    def calls(_options: CallbackOptions) -> list[Observation]:
        return rows(0)

    def handler_time(_options: CallbackOptions) -> list[Observation]:
        return rows(1)

    def mailbox(_options: CallbackOptions) -> list[Observation]:
        return [Observation(len(r._mailbox), _attrs(r)) for r in list(runners())]

    def memory(_options: CallbackOptions) -> list[Observation]:
        return [Observation(rss_bytes())]

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
    meter_started(meter)
    return True


def _at_exit() -> None:
    """The exit's last export, within :data:`FLUSH_TIMEOUT_MS` (once the exporter started in the background
    is set up, within :data:`START_WAIT_S`): a reader that did not get its turn in time (the collector was
    slow) is no error worth a traceback at exit."""
    for thread in _starting:
        thread.join(START_WAIT_S)
    for provider in _started:
        try:
            provider.shutdown(timeout_millis=FLUSH_TIMEOUT_MS)
        except Exception as exc:  # noqa: BLE001 - the program is ending: say it, and end
            _log.debug("metrics: the last export did not finish: %s", exc)
