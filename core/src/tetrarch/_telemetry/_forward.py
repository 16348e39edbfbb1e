"""One process's telemetry recorder: its events, spans and metric points, in batches, to a store.

A :class:`Recorder` listens to the lifecycle events (``_events.LISTENERS``), the finished
spans (:func:`tetrarch._telemetry.subscribe_spans`) and, while ``TETRARCH_METRICS`` is on,
the metric points (a reader in :data:`tetrarch._telemetry.READER_HOOKS`). Each record
becomes a row in a bounded buffer (:data:`MAX_PENDING` rows: past it the oldest are dropped
and counted); a thread of its own, started with the first row, hands the buffer to the
sink a second after its first row came or at once when it holds :data:`BATCH` rows, and at
:meth:`Recorder.close`. The sink is the host agent's store (a message to its ``telemetry``
service) or this process's own store. On the call path a span costs a locked append of the
record as it is (its row is made on the recorder's thread), and nothing runs at all while
nothing is recorded (spans exist only while tracing is on).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from .. import _events
from . import READER_HOOKS, SpanRecord, subscribe_spans, unsubscribe_spans
from ._tables import event_rows, metric_rows, span_row

__all__ = ["BATCH", "FLUSH_S", "MAX_PENDING", "Recorder"]

#: Rows that make a batch go at once; seconds a row waits at most; rows held at most.
BATCH = 512
FLUSH_S = 1.0
MAX_PENDING = 20_000

Sink = Callable[[dict[str, list[tuple]]], None]


class Recorder:
    """Collects this process's rows and hands them to ``sink`` (``{table: rows}``) in batches."""

    def __init__(self, sink: Sink, *, max_pending: int = MAX_PENDING, flush_s: float = FLUSH_S) -> None:
        self.sink = sink
        self.max_pending = max_pending
        self.flush_s = flush_s
        self._rows: deque[tuple[str, Any]] = deque()  # (kind, the record as it came)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._sink_lock = threading.Lock()
        #: Rows dropped (the buffer was full, or the sink failed).
        self.dropped = 0

    def start(self) -> Recorder:
        """Listen to events, spans and (when metrics start) metric points."""
        _events.LISTENERS.append(self.event)
        subscribe_spans(self.span)
        READER_HOOKS.append(self.metric_reader)
        os.register_at_fork(after_in_child=self._forked)
        return self

    # -- records in (any thread; quick: the record is kept as it is, rows are made when they leave) --
    def event(self, record: dict[str, Any]) -> None:
        self._put("e", record)

    def span(self, rec: SpanRecord) -> None:
        self._put("s", rec)

    def points(self, rows: list[tuple]) -> None:
        for row in rows:
            self._put("m", row)

    def _put(self, kind: str, record: Any) -> None:
        if self._closed:
            return
        with self._cond:
            pending = self._rows
            pending.append((kind, record))
            if len(pending) > self.max_pending:
                pending.popleft()
                self.dropped += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tetrarch-telemetry", daemon=True)
                self._thread.start()
            if len(pending) == BATCH:
                self._cond.notify()

    def _forked(self) -> None:
        """In a forked child: this recorder is its parent's; it records nothing more."""
        self._closed = True
        self._rows = deque()

    # -- rows out -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._rows and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                if len(self._rows) < BATCH:
                    self._cond.wait(self.flush_s)
            self.flush()

    def flush(self) -> None:
        """Hand every buffered record to the sink, as rows, now (the calling thread)."""
        with self._sink_lock:
            with self._cond:
                records, self._rows = self._rows, deque()
            if not records:
                return
            batch: dict[str, list[tuple]] = {}
            for kind, record in records:
                try:
                    if kind == "s":
                        batch.setdefault("spans", []).append(span_row(record))
                    elif kind == "m":
                        batch.setdefault("metric_points", []).append(record)
                    else:
                        for table, row in event_rows(record):
                            batch.setdefault(table, []).append(row)
                except Exception:  # noqa: BLE001 - a record that makes no row is dropped, counted
                    self.dropped += 1
            for table, rows in batch.items():  # at most BATCH rows a message
                for start in range(0, len(rows), BATCH):
                    try:
                        self.sink({table: rows[start:start + BATCH]})
                    except Exception:  # noqa: BLE001 - a sink that cannot take them loses them, counted
                        self.dropped += len(rows[start:start + BATCH])

    def close(self) -> None:
        """Stop listening and hand what is buffered to the sink (at this process's end)."""
        if self._closed:
            return
        if self.event in _events.LISTENERS:
            _events.LISTENERS.remove(self.event)
        unsubscribe_spans(self.span)
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- metrics ----------------------------------------------------------------------
    def metric_reader(self) -> Any:
        """An OpenTelemetry reader whose exports become ``metric_points`` rows (``READER_HOOKS``);
        it exports every ``OTEL_METRIC_EXPORT_INTERVAL`` ms (60 000 unless set), as the OTLP one does."""
        from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, PeriodicExportingMetricReader

        recorder = self

        class _ToStore(MetricExporter):
            def __init__(self) -> None:
                super().__init__(preferred_temporality={}, preferred_aggregation={})

            def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
                recorder.points(metric_rows(metrics_data))
                return MetricExportResult.SUCCESS

            def force_flush(self, timeout_millis: float = 10_000) -> bool:
                return True

            def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
                return None

        return PeriodicExportingMetricReader(_ToStore())
