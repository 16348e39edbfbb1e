"""What the caller sees of its calls: metrics per endpoint, and the ``send`` span.

The call path tests :data:`ON` (one module-global read: metrics started, or tracing on) and
does nothing more while it is false. With ``TETRARCH_METRICS=1``, each call updates plain
Python counters of its ``(mesh, endpoint)`` (an OpenTelemetry histogram's ``record`` costs
about 20 µs here, four times a pipelined call); they are read when the exporter asks:

* ``tetrarch.call.count`` (counter, ``{call}``): calls made (every adverb, ``broadcast`` too).
* ``tetrarch.call.errors`` (counter, ``{call}``) [kind]: calls that ended in an error, by kind:
  ``actor_error`` (an actor raised: ``ActorError``), ``supervision`` (an actor was gone or died:
  ``SupervisionError``), ``timeout`` (each ``Future.get(timeout=...)`` that expired).
* ``tetrarch.call.duration`` (histogram, ``s``): from the call until its last reply (or failure);
  not for ``broadcast`` and calls answered to a port, whose outcome the caller does not see.
* ``tetrarch.call.request_bytes`` (counter, ``By``): the pickled arguments' size times the
  number of actors the call went to (what the actors receive, whichever path it took).
* ``tetrarch.call.reply_bytes`` (counter, ``By``): the replies' payload size, summed over ranks.

Attributes: ``mesh`` and ``endpoint``. A call to several actors counts once; it is an error of
kind ``supervision`` if any actor was gone, else ``actor_error`` if any raised.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Callable
from time import perf_counter
from typing import Any

from .._client_hooks import on_client_start
from . import _trace, on_counting, on_meter
from ._io import nbytes
from ._trace import CURRENT as _CURRENT
from ._trace import _random, _rate

__all__ = ["BOUNDS", "ON", "Observation", "Row", "begin", "end", "histogram_metric", "metrics_on",
           "observe_spawn", "refresh", "rows", "timed_out", "trace_field"]

#: Whether calls are observed at all (metrics started, or tracing on): the call path reads only this.
ON = False
_metrics = [False]
#: The duration histogram's bucket upper bounds, in seconds.
BOUNDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
          30.0, 60.0)
_START_NS = time.time_ns()


class Row:
    """One endpoint's counters (the calling threads and the I/O thread add to them without a lock:
    ``+=`` on an attribute may lose an update to a race, a miscount we accept for a free call path).

    A call's duration is appended to ``pending``, and folded into the histogram (``buckets``,
    ``count``, ``sum``, ``min``, ``max``) a thousand at a time and before each read
    (:meth:`fold`): sorting them and cutting at the bounds costs a call far less than a
    bucket search and five updates each."""

    __slots__ = ("calls", "actor_error", "supervision", "timeout", "request_bytes", "reply_bytes", "buckets",
                 "count", "sum", "min", "max", "pending")

    def __init__(self) -> None:
        self.calls = self.actor_error = self.supervision = self.timeout = 0
        self.request_bytes = self.reply_bytes = self.count = 0
        self.buckets = [0] * (len(BOUNDS) + 1)
        self.sum = 0.0
        self.min = float("inf")
        self.max = 0.0
        self.pending: list[float] = []

    def fold(self) -> Row:
        """Fold the pending durations into the histogram; this row."""
        pending = self.pending
        if pending:
            self.pending = []
            pending.sort()
            below = 0
            for i, bound in enumerate(BOUNDS):  # bucket i: (BOUNDS[i-1], BOUNDS[i]], as bisect_left placed them
                upto = bisect_right(pending, bound, below)
                self.buckets[i] += upto - below
                below = upto
            self.buckets[-1] += len(pending) - below
            self.count += len(pending)
            self.sum += sum(pending)
            self.min = min(self.min, pending[0])
            self.max = max(self.max, pending[-1])
        return self


_rows: dict[str, Row] = {}  # "mesh.endpoint" -> its row


def rows() -> dict[str, Row]:
    """Every endpoint's counters, by ``"mesh.endpoint"`` (a copy of the index; the rows are live, and folded)."""
    return {what: row.fold() for what, row in list(_rows.items())}


def _row(what: str) -> Row:
    row = _rows.get(what)
    if row is None:
        row = _rows.setdefault(what, Row())
    return row


def refresh() -> None:
    """Compute :data:`ON` again (tracing's settings are read again)."""
    global ON
    _trace.refresh()
    ON = _metrics[0] or _trace.ON


def metrics_on() -> bool:
    """Whether caller-side metrics are being counted in this process."""
    return _metrics[0]


#: What :func:`begin` gives: None (not observed), the start time (counted, not traced; a float adds no object
#: for the garbage collector to walk in a pipeline of pending calls), or ``(start time, send span)``.
Observation = float | tuple[float, Any] | None


def begin(what: str, payload: list, n: int) -> Observation:
    """A call to ``n`` actors of ``what`` (``"mesh.endpoint"``) is about to leave with ``payload``: its
    observation for :func:`end`, or None when nothing observes it."""
    if _metrics[0]:
        row = _rows.get(what)
        if row is None:
            row = _row(what)
        row.calls += 1
        if payload:
            row.request_bytes += nbytes(payload) * n
    if _trace.ON:  # _trace.start, inlined: an untraced call (the common case) pays a context read and a random number
        cur = _CURRENT.get()
        if cur is not None or _random() < _rate[0]:
            return (perf_counter(), _trace.open_span("send", _send_attrs(what, n), cur))
    return perf_counter() if _metrics[0] else None


def _send_attrs(what: str, n: int) -> dict[str, Any]:
    mesh, _, endpoint = what.rpartition(".")
    return {"mesh": mesh, "endpoint": endpoint, "actors": n}


def trace_field(obs: Observation) -> tuple[int, int] | None:
    """The trace field the call's headers carry (:attr:`~tetrarch._runtime.values._wire.CallHeader.trace`)."""
    if type(obs) is tuple:
        span = obs[1]
        return (span[0], span[1])
    return None


def end(obs: Observation, frames: list | None, what: str) -> None:
    """The call to ``what`` observed by ``obs`` is over: ``frames`` are its replies' ``(status, payload)``,
    or None when the caller gets none (``broadcast``, replies to a port)."""
    if type(obs) is float:  # counted, not traced: the common case, kept to the fewest steps
        if frames is not None:
            row = _rows.get(what)
            if row is not None:
                _count_end(row, perf_counter() - obs, frames)
        return
    if not isinstance(obs, tuple):  # None: nothing observed it
        return
    t0, span = obs  # traced: (start time, send span)
    if frames is None:
        _trace.end(span, "sent")
        return
    worst = _count_end(_rows.get(what) if _metrics[0] else None, perf_counter() - t0, frames)
    _trace.end(span, "dead" if worst == 2 else "error" if worst == 1 else "ok")


def _count_end(row: Row | None, seconds: float, frames: list) -> int:
    """Add a call's outcome (its ``seconds``, its replies' ``frames``) to ``row``, if any; the worst status
    of any rank (``_wire.OK`` 0, ``ERR`` 1, ``DEAD`` 2)."""
    worst = size = 0
    for frame in frames:
        if frame is not None:
            status, payload = frame
            if status > worst:
                worst = status
            size += nbytes(payload)
    if row is not None:
        pending = row.pending
        pending.append(seconds)
        if len(pending) >= 1024:
            row.fold()
        row.reply_bytes += size
        if worst == 2:
            row.supervision += 1
        elif worst == 1:
            row.actor_error += 1
    return worst


def observe_spawn(mesh: str, cls: str, n: int) -> Observation:
    """A spawn of ``n`` actors of class ``cls`` as ``mesh``: its observation for :func:`end` (the ``spawn``
    span; spawns are not counted as calls), or None when not traced."""
    span = _trace.start("spawn", {"mesh": mesh, "class": cls, "actors": n}) if _trace.ON else None
    return None if span is None else (perf_counter(), span)


def timed_out(call: Any) -> None:
    """A ``Future.get(timeout=...)`` of ``call`` (its ``_Call``, or None) expired."""
    if _metrics[0] and call is not None:
        _row(getattr(call, "_what", "?")).timeout += 1


def _attrs(what: str) -> dict[str, str]:
    mesh, _, endpoint = what.rpartition(".")
    return {"mesh": mesh, "endpoint": endpoint}


def histogram_metric() -> Any:
    """``tetrarch.call.duration`` as the OpenTelemetry SDK's ``Metric`` (cumulative), or None before any call."""
    from opentelemetry.sdk.metrics.export import AggregationTemporality, Histogram, HistogramDataPoint, Metric

    now = time.time_ns()
    points = [HistogramDataPoint(_attrs(what), _START_NS, now, row.count, row.sum, list(row.buckets), BOUNDS,
                                 row.min, row.max) for what, row in rows().items() if row.count]
    if not points:
        return None
    return Metric("tetrarch.call.duration", "seconds from a call until its outcome", "s",
                  Histogram(points, AggregationTemporality.CUMULATIVE))


def _count() -> None:
    """Metrics are on (:func:`tetrarch._telemetry.on_counting`): count calls from now on."""
    _metrics[0] = True
    refresh()


def _start_metrics(meter: Any) -> None:
    """Metrics started (:func:`tetrarch._telemetry.on_meter`): add the instruments that read the counters."""
    from opentelemetry.metrics import CallbackOptions, Observation

    from ._otlp import METRIC_PRODUCERS

    def column(name: str) -> Callable[[CallbackOptions], list[Observation]]:
        def observe(_options: CallbackOptions) -> list[Observation]:
            return [Observation(getattr(row, name), _attrs(what)) for what, row in list(_rows.items())]
        return observe

    def errors(_options: CallbackOptions) -> list[Observation]:
        return [Observation(getattr(row, kind), {**_attrs(what), "kind": kind}) for what, row in list(_rows.items())
                for kind in ("actor_error", "supervision", "timeout")]

    meter.create_observable_counter("tetrarch.call.count", [column("calls")], unit="{call}",
                                    description="calls made, per endpoint")
    meter.create_observable_counter("tetrarch.call.errors", [errors], unit="{call}",
                                    description="calls that ended in an error, by kind")
    meter.create_observable_counter("tetrarch.call.request_bytes", [column("request_bytes")], unit="By",
                                    description="argument bytes sent, times the actors called")
    meter.create_observable_counter("tetrarch.call.reply_bytes", [column("reply_bytes")], unit="By",
                                    description="reply payload bytes received")
    METRIC_PRODUCERS.append(histogram_metric)


def _client_started(root: Any) -> None:
    """The client's runtime started: read the settings again (``configure()`` may have changed them), and start
    the span exporter they name, on a thread, while the host agents launch."""
    refresh()
    _trace.start_export("client", root.router.name, background=True)


on_counting(_count)
on_meter(_start_metrics)
on_client_start(_client_started)
refresh()
