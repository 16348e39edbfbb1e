"""Metrics through OpenTelemetry (``TETRARCH_METRICS=1``), received by a real OTLP/HTTP receiver.

The receiver (``otlp_receiver``) is an HTTP server in the test that decodes the collector protocol's
``ExportMetricsServiceRequest`` (OpenTelemetry's proto package): what a Collector, Prometheus
or Grafana Agent would receive.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from otlp_receiver import dead_port, receiving
from tetrarch.testing import scaled

pytest.importorskip("opentelemetry.sdk", reason="metrics need OpenTelemetry: pip install \"tetrarch[otel]\"")
pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(120))]


def test_endpoint_calls_and_process_metrics_reach_an_otlp_receiver() -> None:
    here = Path(__file__).parent
    with receiving() as receiver:
        env = {**os.environ, "TETRARCH_METRICS": "1", "OTEL_METRIC_EXPORT_INTERVAL": "200",
               "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "metrics-test",
               "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])}
        res = subprocess.run([sys.executable, str(here / "scenarios" / "metrics_calls.py")], env=env,
                             capture_output=True, text=True, timeout=scaled(90))
    assert res.returncode == 0 and "DONE" in res.stdout, res.stderr[-3000:]
    points = receiver.points
    calls = [(a, v) for name, a, v, _ in points if name == "tetrarch.actor.calls" and a.get("mesh") == "measured"
             and a.get("endpoint") == "rank"]
    by_rank = {a["rank"]: max(v for b, v in calls if b["rank"] == a["rank"]) for a, _ in calls}
    assert by_rank.get(0) == 7 and by_rank.get(1) is None, by_rank  # rank 1 was never called
    assert any(name == "tetrarch.actor.handler_time" and v > 0 for name, _, v, _ in points)
    resources = [r for name, _, _, r in points if name == "tetrarch.proc.memory"]
    assert {r["service.name"] for r in resources} == {"metrics-test"}
    assert {r["tetrarch.role"] for r in resources} == {"client", "host", "proc"}
    roles = {r["tetrarch.process"]: r["tetrarch.role"] for r in resources}
    assert [p for p, role in roles.items() if role == "host"] == ["host0"], roles  # the host agent, as itself
    assert all(v > 0 for name, _, v, _ in points if name == "tetrarch.proc.memory")


def test_a_collector_that_is_down_never_holds_the_program_up(tmp_path) -> None:
    here = Path(__file__).parent
    port = dead_port()
    env = {**os.environ, "TETRARCH_METRICS": "1", "OTEL_METRIC_EXPORT_INTERVAL": "200",
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
           "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, str(here / "scenarios" / "metrics_calls.py")], env=env,
                         capture_output=True, text=True, timeout=scaled(90))
    assert res.returncode == 0 and "DONE" in res.stdout, res.stderr[-3000:]
    assert "metrics could not be exported" in res.stderr and "Transient error" not in res.stderr, res.stderr
