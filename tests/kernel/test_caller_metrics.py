"""Caller-side metrics (``TETRARCH_METRICS=1``) of a known workload, received by a real OTLP/HTTP receiver.

The workload (``scenarios/caller_metrics.py``) makes ``CALLS`` calls of ``workers.echo`` to a
mesh of two, one call that raises, one wait that times out and one call whose proc dies; the
test checks the client's counters, bytes, errors by kind and the duration histogram as the
collector receives them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from otlp_receiver import receiving
from tetrarch._runtime.values import _serial
from tetrarch.testing import scaled

pytest.importorskip("opentelemetry.sdk", reason="metrics need OpenTelemetry: pip install \"tetrarch[otel]\"")
pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(120))]

HERE = Path(__file__).parent
CALLS, REQUEST, REPLY = 5, 100_000, 50_000  # as in scenarios/caller_metrics.py


def _nbytes(frames: list) -> int:
    return sum(memoryview(f).nbytes for f in frames)


def _last(points: list, name: str, **attrs: object) -> float | None:
    """The last value the client exported for ``name`` with ``attrs`` (cumulative counters: the largest)."""
    values = [v for n, a, v, res in points if n == name and res.get("tetrarch.role") == "client"
              and all(a.get(k) == w for k, w in attrs.items())]
    return max(values) if values else None


def test_a_known_workload_is_counted_exactly_by_the_caller() -> None:
    with receiving() as receiver:
        env = {**os.environ, "TETRARCH_METRICS": "1", "OTEL_METRIC_EXPORT_INTERVAL": "200",
               "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "caller-test"}
        res = subprocess.run([sys.executable, str(HERE / "scenarios" / "caller_metrics.py")], env=env,
                             capture_output=True, text=True, timeout=scaled(90))
    assert res.returncode == 0 and "DONE" in res.stdout, res.stderr[-3000:]
    points = receiver.points
    echo = {"mesh": "workers", "endpoint": "echo"}
    assert _last(points, "tetrarch.call.count", **echo) == CALLS
    # The pickled argument, times the two actors each call went to; the reply of each rank.
    request = _nbytes(_serial.dumps(((b"x" * REQUEST,), {})))
    reply = _nbytes(_serial.dumps(b"y" * REPLY))
    assert REQUEST < request < REQUEST + 200 and REPLY < reply < REPLY + 200
    assert _last(points, "tetrarch.call.request_bytes", **echo) == CALLS * 2 * request
    assert _last(points, "tetrarch.call.reply_bytes", **echo) == CALLS * 2 * reply
    for kind in ("actor_error", "supervision", "timeout"):
        assert _last(points, "tetrarch.call.errors", **echo, kind=kind) == 0, kind
    assert _last(points, "tetrarch.call.errors", mesh="workers", endpoint="fail", kind="actor_error") == 1
    assert _last(points, "tetrarch.call.errors", mesh="workers", endpoint="park", kind="timeout") == 1
    assert _last(points, "tetrarch.call.errors", mesh="doomed", endpoint="exit", kind="supervision") == 1
    assert _last(points, "tetrarch.call.count", mesh="workers", endpoint="park") == 1
    hist = [p for n, a, p, res in receiver.histograms if n == "tetrarch.call.duration" and a == echo
            and res.get("tetrarch.role") == "client"]
    assert hist, "no call-duration histogram for workers.echo was exported"
    last = max(hist, key=lambda p: p.count)
    assert last.count == CALLS and sum(last.bucket_counts) == CALLS and last.sum > 0
    assert len(last.bucket_counts) == len(last.explicit_bounds) + 1 and last.min <= last.max


def test_a_client_that_exits_at_once_still_exports_its_metrics() -> None:
    """A client sets its exporter up on a thread while it launches its host agents (the imports cost about
    240 ms of CPU): one that exits before that thread is done waits for it, then makes its last export."""
    code = "from tetrarch import this_host\nthis_host()\nprint('UP', flush=True)\n"
    with receiving() as receiver:
        env = {**os.environ, "TETRARCH_METRICS": "1", "OTEL_METRIC_EXPORT_INTERVAL": "600000",  # the exit's only
               "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=scaled(60))
    assert res.returncode == 0 and "UP" in res.stdout, res.stderr[-3000:]
    assert [v for n, _a, v, r in receiver.points if n == "tetrarch.proc.memory" and r.get("tetrarch.role") == "client"]


def test_durations_fold_into_the_buckets_a_search_would_give() -> None:
    """Durations wait in a list and are folded a thousand at a time: the histogram is the one a
    bucket search per call gives (upper bounds inclusive, as OpenTelemetry's explicit buckets)."""
    import random
    from bisect import bisect_left

    from tetrarch._telemetry._caller import BOUNDS, Row

    rng = random.Random(35)
    durations = [rng.choice(BOUNDS) for _ in range(500)] + [rng.uniform(0, 70) for _ in range(2500)] + [0.0]
    row = Row()
    expected = [0] * (len(BOUNDS) + 1)
    for i, dt in enumerate(durations):
        row.pending.append(dt)
        expected[bisect_left(BOUNDS, dt)] += 1
        if i % 700 == 0:
            row.fold()
    row.fold()
    assert row.buckets == expected
    assert (row.count, row.min, row.max) == (len(durations), min(durations), max(durations))
    assert row.sum == pytest.approx(sum(durations))
    assert not row.pending
