"""Per-connection and per-RDMA-backend counters (``TETRARCH_METRICS=1``), as the exporter reads them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tetrarch.testing import scaled

pytest.importorskip("opentelemetry.sdk", reason="metrics need OpenTelemetry: pip install \"tetrarch[otel]\"")

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(120))]


def test_connections_and_rdma_transfers_are_counted() -> None:
    here = Path(__file__).parent
    env = {**os.environ, "TETRARCH_METRICS": "1", "OTEL_METRIC_EXPORT_INTERVAL": "600000",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # no collector: the points are read in-process
           "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, str(here / "scenarios" / "io_metrics.py")], env=env,
                         capture_output=True, text=True, timeout=scaled(90))
    assert res.returncode == 0 and "POINTS" in res.stdout, res.stderr[-3000:]
    points = json.loads(res.stdout.split("POINTS", 1)[1])
    assert "Traceback" not in res.stderr, res.stderr[-3000:]

    def value(name: str, **attrs: str) -> list[int]:
        return [v for n, a, v in points if n == name and all(a.get(k) == x for k, x in attrs.items())]

    # The proc's connection carried the five 10 000-byte calls (and spawn, init, the buffer's handle).
    out_bytes = value("tetrarch.connection.bytes", direction="out")
    assert max(out_bytes) >= 5 * 10_000, points
    out_msgs = value("tetrarch.connection.messages", direction="out")
    in_msgs = value("tetrarch.connection.messages", direction="in")
    assert max(out_msgs) >= 7 and max(in_msgs) >= 7, points
    assert value("tetrarch.rdma.transfers", op="read", outcome="ok") == [1], points
    assert value("tetrarch.rdma.bytes", op="read") == [1 << 20], points


def test_malformed_otel_settings_give_one_warning_and_the_defaults() -> None:
    here = Path(__file__).parent
    env = {**os.environ, "TETRARCH_METRICS": "1", "OTEL_METRIC_EXPORT_INTERVAL": "abc",
           "OTEL_EXPORTER_OTLP_HEADERS": "garbage", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
           "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, str(here / "scenarios" / "metrics_calls.py")], env=env,
                         capture_output=True, text=True, timeout=scaled(90))
    assert res.returncode == 0 and "DONE" in res.stdout, res.stderr[-3000:]
    warnings = [line for line in res.stderr.splitlines() if "malformed OpenTelemetry settings" in line]
    assert len(warnings) == 1, res.stderr  # the client's, for the whole job
    assert "OTEL_METRIC_EXPORT_INTERVAL='abc'" in warnings[0] and "OTEL_EXPORTER_OTLP_HEADERS='garbage'" in warnings[0]
    # OpenTelemetry's own complaints, once per read in every process, are gone.
    assert "Found invalid value" not in res.stderr and "Header format invalid" not in res.stderr, res.stderr
