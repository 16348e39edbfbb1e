"""Calls and an RDMA read with TETRARCH_METRICS=1; prints the client's connection and RDMA points as JSON.

An in-memory OpenTelemetry reader joins the client's provider (``_telemetry.READER_HOOKS``), so
the test reads what the OTLP exporter would send, without a collector.
"""

import json

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tetrarch import _telemetry

reader = InMemoryMetricReader()
_telemetry.READER_HOOKS.append(lambda: reader)

from tetrarch import Actor, endpoint, this_host  # noqa: E402 - after the reader is registered
from tetrarch.rdma import RDMABuffer  # noqa: E402

SIZE = 1 << 20


class Holder(Actor):
    def __init__(self) -> None:
        self.data = bytearray(b"r" * SIZE)
        self.buf = RDMABuffer(memoryview(self.data))

    @endpoint
    def buffer(self) -> RDMABuffer:
        return self.buf

    @endpoint
    def echo(self, payload: bytes) -> int:
        return len(payload)


procs = this_host().spawn_procs(per_host={"gpus": 1}, name="io")
holder = procs.spawn("holder", Holder)
holder.echo.call_one(b"").get()
for _ in range(5):
    assert holder.echo.call_one(b"y" * 10_000).get() == 10_000
buf = holder.buffer.call_one().get()
dst = bytearray(SIZE)
buf.read_into(memoryview(dst)).get()
assert dst == bytearray(b"r" * SIZE)
points = []
for rm in reader.get_metrics_data().resource_metrics:
    for sm in rm.scope_metrics:
        for m in sm.metrics:
            if m.name.startswith(("tetrarch.connection.", "tetrarch.rdma.")):
                points += [(m.name, dict(p.attributes), p.value) for p in m.data.data_points]
procs.stop().get()
print("POINTS", json.dumps(points), flush=True)
