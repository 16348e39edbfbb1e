"""OTLP export shared by metrics and spans, and the span exporter (``TETRARCH_TRACE_EXPORT=otlp``).

Both go through OpenTelemetry's standard OTLP/HTTP exporters, configured by the standard
``OTEL_*`` variables (endpoint, headers, timeout, ``OTEL_BSP_*`` for the span queue). A
collector that is down or slow never holds the program up: spans wait in the SDK's
``BatchSpanProcessor`` (a bounded queue, exported from its own thread; when it is full, spans
are dropped), an export that fails is counted in :data:`DROPPED` and the first one warned about,
and at exit the last export gets :data:`FLUSH_TIMEOUT_MS`.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from .._log import get_logger
from . import SpanRecord, subscribe_spans, unsubscribe_spans

__all__ = ["DROPPED", "FLUSH_TIMEOUT_MS", "METRIC_PRODUCERS", "SPAN_EXPORT_MODULES", "START_WAIT_S",
           "counting_exporter", "in_background", "otel_resource", "start_span_export", "to_readable", "with_produced"]

_log = get_logger("telemetry")
#: Milliseconds the exit's last export may take.
FLUSH_TIMEOUT_MS = 1000
#: Exports that did not reach the collector in this process, by signal (``metrics``, ``spans``):
#: the first of each is warned about, the others counted.
DROPPED: dict[str, int] = {"metrics": 0, "spans": 0}
_started: list[Any] = []
#: Each gives one more OpenTelemetry SDK ``Metric`` (or None) to add to every OTLP metrics export: data the
#: SDK's instruments cannot carry cheaply (the call-duration histogram, :mod:`._caller`).
METRIC_PRODUCERS: list[Callable[[], Any]] = []


def otel_resource(role: str, name: str) -> Any:
    """The OpenTelemetry ``Resource`` of this process: ``service.name`` (``OTEL_SERVICE_NAME``, default
    ``tetrarch``), its role and name, host and pid."""
    from opentelemetry.sdk.resources import Resource

    return Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "tetrarch"),
                            "tetrarch.role": role, "tetrarch.process": name,
                            "host.name": socket.gethostname(), "process.pid": os.getpid()})


def counting_exporter(base: type, signal: str, success: Any) -> type:
    """``base`` (an OTLP exporter class) counting in ``DROPPED[signal]``, and warning once about, the
    exports whose result is not ``success``."""
    # Its own log says the same at every retry of every export: one warning of ours instead.
    logging.getLogger("opentelemetry.exporter.otlp.proto.http").setLevel(logging.CRITICAL)

    class Counting(base):
        def export(self, data: Any, *args: Any, **kwargs: Any) -> Any:
            if signal == "metrics" and METRIC_PRODUCERS:
                data = with_produced(data)
            result = super().export(data, *args, **kwargs)
            if result is not success:
                DROPPED[signal] += 1
                if DROPPED[signal] == 1:
                    _log.warning("%s could not be exported to %s (the collector is down or slow): they are "
                                 "dropped and counted, and the program goes on", signal,
                                 getattr(self, "_endpoint", "?"))
            return result

    return Counting


def with_produced(data: Any) -> Any:
    """``data`` (the SDK's ``MetricsData``) with the metrics of :data:`METRIC_PRODUCERS` added to its first
    resource, in a scope of their own; ``data`` itself when they have none."""
    from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics, ScopeMetrics
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    extra = []
    for produce in METRIC_PRODUCERS:
        try:
            metric = produce()
        except Exception as exc:  # noqa: BLE001 - one producer that fails leaves the others
            _log.debug("metrics: a producer failed: %s", exc)
            continue
        if metric is not None:
            extra.append(metric)
    if not extra or not data.resource_metrics:
        return data
    first = data.resource_metrics[0]
    scope = ScopeMetrics(InstrumentationScope("tetrarch.produced"), extra, "")  # its own: the encoder merges by scope
    return MetricsData([ResourceMetrics(first.resource, [*first.scope_metrics, scope], first.schema_url),
                        *data.resource_metrics[1:]])


def to_readable(rec: SpanRecord, resource: Any) -> Any:
    """``rec`` as the OpenTelemetry SDK's ``ReadableSpan`` (a remote parent when it has one)."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    flags = TraceFlags(TraceFlags.SAMPLED)
    parent = SpanContext(rec.trace_id, rec.parent_id, True, flags) if rec.parent_id else None
    status = rec.attrs.get("status")
    kind = {"send": SpanKind.CLIENT, "receive": SpanKind.SERVER}.get(rec.name, SpanKind.INTERNAL)
    return ReadableSpan(
        rec.name, SpanContext(rec.trace_id, rec.span_id, False, flags), parent, resource,
        {**rec.attrs, "thread.id": rec.tid}, kind=kind, start_time=rec.start_ns, end_time=rec.end_ns,
        status=Status(StatusCode.ERROR) if status in ("error", "dead") else Status(StatusCode.UNSET),
        instrumentation_scope=InstrumentationScope("tetrarch"))


#: What :func:`start_span_export` imports (see ``actors._metrics.METRIC_MODULES``).
SPAN_EXPORT_MODULES = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.sdk.trace",
                       "opentelemetry.sdk.trace.export", "opentelemetry.trace", "opentelemetry.sdk.resources",
                       "requests")
#: Seconds an exit waits for an exporter still being set up in the background.
START_WAIT_S = 10.0


def in_background(target: Callable[[], Any], name: str) -> threading.Thread:
    """Run ``target`` (an exporter's set-up: its imports cost about 240 ms of CPU) on a daemon thread that the
    interpreter's exit waits for, :data:`START_WAIT_S` at most, before ``concurrent.futures`` refuses new work
    (which the exporters' set-up uses): that refusal comes from a hook that ``threading`` runs at exit, before it
    joins threads and long before ``atexit``'s; hooks run newest first, so ours goes in after that one."""
    import concurrent.futures.thread  # noqa: F401 - registers its hook now, before ours

    thread = threading.Thread(target=target, name=name, daemon=True)
    register = getattr(threading, "_register_atexit", None)  # CPython 3.9+
    if register is not None:
        register(thread.join, START_WAIT_S)
    thread.start()
    return thread


class _SpanExport:
    """The span subscriber of :func:`start_span_export`. Spans finished while the exporter is still being set up
    wait here, as many as the SDK's queue holds (``OTEL_BSP_MAX_QUEUE_SIZE``, 2048 unless set; past that they
    are dropped, as the full queue would drop them), and go to the exporter once it exists."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: list[SpanRecord] = []
        self.limit = _queue_size()
        self.resource: Any = None
        self.processor: Any = None
        self.failed = False

    def __call__(self, rec: SpanRecord) -> None:
        processor = self.processor
        if processor is None:
            with self.lock:  # against set_up's hand-over: a span either waits and is handed over, or is exported
                processor = self.processor
                if processor is None:
                    if len(self.waiting) < self.limit:
                        self.waiting.append(rec)
                    return
        processor.on_end(to_readable(rec, self.resource))

    def set_up(self, role: str, name: str) -> bool:
        """Build the exporter (missing packages or a malformed ``OTEL_*`` setting: one warning, and nothing is
        exported), then export the spans that waited; whether it started."""
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
        except ImportError as exc:
            _log.warning("TETRARCH_TRACE_EXPORT=otlp but OpenTelemetry is missing (%s): pip install "
                         "\"tetrarch[otel]\"", exc)
            return self._give_up()
        try:
            resource = otel_resource(role, name)
            processor = BatchSpanProcessor(counting_exporter(OTLPSpanExporter, "spans", SpanExportResult.SUCCESS)())
        except Exception as exc:  # noqa: BLE001 - a malformed OTEL_* setting: one warning, no export
            _log.warning("TETRARCH_TRACE_EXPORT: the OTLP exporter could not be set up from the OTEL_* settings: %s",
                         exc)
            return self._give_up()
        self.resource = resource
        with self.lock:
            self.processor = processor
            waiting, self.waiting = self.waiting, []
        for rec in waiting:
            processor.on_end(to_readable(rec, resource))
        return True

    def _give_up(self) -> bool:
        self.failed = True
        unsubscribe_spans(self)
        with self.lock:
            self.waiting = []
        return False


def _queue_size() -> int:
    try:
        return max(1, int(os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE", "2048")))
    except ValueError:  # the SDK warns about it when it builds its processor
        return 2048


def start_span_export(role: str, name: str, *, background: bool = False) -> bool:
    """Export this process's spans through OTLP from now on, as those of process ``name`` in ``role``
    (:func:`otel_resource`); whether it started, or is starting (once per process).

    With ``background`` the exporter is set up on a thread (:func:`in_background`; a client launches its host
    agents meanwhile) and the spans finished meanwhile wait for it. Missing OpenTelemetry packages or a malformed
    ``OTEL_*`` setting give one warning, never an error.
    """
    if _started:
        return not _started[0].failed
    export = _SpanExport()
    _started.append(export)
    subscribe_spans(export)
    atexit.register(_flush_at_exit, export)
    if background:
        in_background(lambda: export.set_up(role, name), "tetrarch-spans-start")
        return True
    return export.set_up(role, name)


def _flush_at_exit(export: _SpanExport) -> None:
    """Export what is queued, for :data:`FLUSH_TIMEOUT_MS` at most (a slow collector does not hold the exit)."""
    if export.processor is None:  # never set up (or still being set up past the exit's wait)
        return
    done = threading.Thread(target=export.processor.shutdown, name="tetrarch-span-flush", daemon=True)
    done.start()
    done.join(FLUSH_TIMEOUT_MS / 1000)
