"""A real OTLP/HTTP receiver for tests: decodes what OpenTelemetry's exporters send.

``ExportMetricsServiceRequest`` (``/v1/metrics``) and ``ExportTraceServiceRequest``
(``/v1/traces``), with the collector protocol's own protobuf classes: what a Collector,
Prometheus or Grafana Agent would receive.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Receiver", "dead_port", "receiving"]


class Receiver(ThreadingHTTPServer):
    """Metric points as ``(name, attributes, value, resource)``, histograms as ``(name, attributes, data point,
    resource)`` and spans as ``(span, resource)``, as they arrive."""

    def __init__(self) -> None:
        self.points: list[tuple[str, dict[str, Any], float, dict[str, Any]]] = []
        self.histograms: list[tuple[str, dict[str, Any], Any, dict[str, Any]]] = []
        self.spans: list[tuple[Any, dict[str, Any]]] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        reply = self._traces(body) if self.path.endswith("/v1/traces") else self._metrics(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(reply)

    def _metrics(self, body: bytes) -> bytes:
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as pb

        request = pb.ExportMetricsServiceRequest()
        request.ParseFromString(body)
        with self.server.lock:
            for rm in request.resource_metrics:
                res = attributes(rm.resource.attributes)
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if m.HasField("histogram"):
                            for p in m.histogram.data_points:
                                self.server.histograms.append((m.name, attributes(p.attributes), p, res))
                            continue
                        data = m.sum if m.HasField("sum") else m.gauge
                        for p in data.data_points:
                            value = p.as_double if p.HasField("as_double") else p.as_int
                            self.server.points.append((m.name, attributes(p.attributes), value, res))
        return pb.ExportMetricsServiceResponse().SerializeToString()

    def _traces(self, body: bytes) -> bytes:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

        request = pb.ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.server.lock:
            for rs in request.resource_spans:
                res = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        self.server.spans.append((span, res))
        return pb.ExportTraceServiceResponse().SerializeToString()

    def log_message(self, *_args: Any) -> None:
        pass


def attributes(kvs: Any) -> dict[str, Any]:
    """OTLP ``KeyValue`` attributes as a dict."""
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) if kv.value.WhichOneof("value") else None
            for kv in kvs}


@contextmanager
def receiving() -> Iterator[Receiver]:
    """A receiver serving on a loopback port for the block."""
    receiver = Receiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.shutdown()
        receiver.server_close()
        thread.join(10)


def dead_port() -> int:
    """A loopback port nobody listens on (a collector that is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
