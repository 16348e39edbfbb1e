"""Telemetry records inside one process, and who listens to them.

The call path, spawn and the lifecycle code *publish* finished records here; exporters
*subscribe* (the Perfetto trace-file writer, the OTLP span exporter, the forwarder to the
host's SQL store). Publishing with no subscriber costs one list check, and nothing is
built before :data:`TRACING` says a span is wanted at all.

A span is a :class:`SpanRecord`; ids are ints (128-bit trace, 64-bit span), 0 meaning none.
Span names: ``send`` (the caller, from the call until its outcome is known), ``receive``
(the actor's process, from the message's arrival until its handler starts), ``handle``
(the handler), ``spawn`` (a mesh's spawn, on the caller). ``attrs`` carries ``mesh``,
``endpoint``, ``rank``, ``status`` (``ok``/``error``/``dead``) as they apply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["READER_HOOKS", "SPAN_LISTENERS", "SpanRecord", "counting_started", "meter_started", "notify", "on_counting",
           "on_meter", "publish_span", "subscribe_spans", "unsubscribe_spans"]


class SpanRecord(NamedTuple):
    """One finished span of this process."""

    trace_id: int
    span_id: int
    parent_id: int
    name: str
    start_ns: int  #: ``time.time_ns()`` at the start
    end_ns: int
    pid: int
    tid: int  #: ``threading.get_native_id()`` of the thread that ran it
    attrs: dict[str, Any]


#: The subscribers; each is called with every span this process finishes, on the finishing
#: thread: it must be quick and must not raise (buffer, then export elsewhere).
SPAN_LISTENERS: list[Callable[[SpanRecord], None]] = []


def subscribe_spans(fn: Callable[[SpanRecord], None]) -> None:
    """Call ``fn`` with every span this process finishes from now on."""
    if fn not in SPAN_LISTENERS:
        SPAN_LISTENERS.append(fn)


def unsubscribe_spans(fn: Callable[[SpanRecord], None]) -> None:
    """Stop calling ``fn``; a no-op if it was not subscribed."""
    if fn in SPAN_LISTENERS:
        SPAN_LISTENERS.remove(fn)


def notify(listeners: list[Callable[[Any], None]], record: Any) -> None:
    """Hand ``record`` to each of ``listeners``; one that raises misses this record only."""
    for fn in listeners:
        try:
            fn(record)
        except Exception:  # noqa: BLE001 - telemetry never breaks the program
            pass


def publish_span(rec: SpanRecord) -> None:
    """Hand ``rec`` to every subscriber (:func:`notify`)."""
    notify(SPAN_LISTENERS, rec)


#: Each makes one more OpenTelemetry ``MetricReader`` for this process's ``MeterProvider`` when
#: metrics start (``TETRARCH_METRICS``): register before that (a provider takes its readers once).
READER_HOOKS: list[Callable[[], Any]] = []
_meter_hooks: list[Callable[[Any], None]] = []
_meter: list[Any] = []


def on_meter(fn: Callable[[Any], None]) -> None:
    """Call ``fn`` with this process's OpenTelemetry ``Meter`` to add its instruments: when metrics
    start, or now if they already have. Never called while metrics are off."""
    _meter_hooks.append(fn)
    if _meter:
        fn(_meter[0])


_count_hooks: list[Callable[[], None]] = []
_counting: list[bool] = []


def on_counting(fn: Callable[[], None]) -> None:
    """Call ``fn`` (no argument) when this process starts counting for metrics, or now if it has: the
    counters the instruments read start before the exporter exists (which may load meanwhile)."""
    _count_hooks.append(fn)
    if _counting:
        fn()


def counting_started() -> None:
    """Metrics are on in this process (``actors._metrics``): run the counting hooks, once."""
    if not _counting:
        _counting.append(True)
        for fn in list(_count_hooks):
            fn()


def meter_started(meter: Any) -> None:
    """Metrics started with ``meter`` (``actors._metrics``): counting too, if not yet; run the hooks
    registered so far."""
    counting_started()
    _meter.append(meter)
    for fn in list(_meter_hooks):
        fn(meter)
