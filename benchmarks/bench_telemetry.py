"""What telemetry costs a call (issue 35's overhead table): off, metrics on, tracing at 1 % and at 100 %.

Each mode runs in its own client process (the settings are read when a process starts), with
one actor on one proc: sequential ``call_one().get()`` (p50) and pipelined calls (calls/s). The
modes take turns, round after round, so they share the machine's state; the table gives each
mode's median over the rounds and its ratio to ``off`` in the same run.

Metrics export every second to an OTLP/HTTP receiver in this process that answers 200 at
once (a collector that keeps up); spans go to every subscriber the settings turn on (the
host's telemetry store by default).

Run: ``python benchmarks/bench_telemetry.py [--rounds 3] [--calls 2000] [--pipelined 10000] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))

MODES: dict[str, dict[str, str]] = {
    "off": {},
    "metrics": {"TETRARCH_METRICS": "1", "OTEL_METRIC_EXPORT_INTERVAL": "1000"},
    "tracing 1 %": {"TETRARCH_TRACE_SAMPLE": "0.01"},
    "tracing 100 %": {"TETRARCH_TRACE_SAMPLE": "1"},
}

_CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, {here!r})
from bench_actors import Noop
from tetrarch import this_host

procs = this_host().spawn_procs(per_host={{"gpus": 1}})
mesh = procs.spawn("noop", Noop)
mesh.initialized.get()
for _ in range(500):
    mesh.noop.call_one().get()
times = []
for _ in range({calls}):
    t0 = time.perf_counter()
    mesh.noop.call_one().get()
    times.append(time.perf_counter() - t0)
t0, c0 = time.perf_counter(), time.process_time()
futures = [mesh.noop.call_one() for _ in range({pipelined})]
for f in futures:
    f.get()
rate = {pipelined} / (time.perf_counter() - t0)
cpu = (time.process_time() - c0) / {pipelined}
procs.stop().get()
print("RESULT", json.dumps({{"p50": statistics.median(times), "rate": rate, "cpu": cpu}}), flush=True)
"""


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


def _run(mode: str, env: dict[str, str], calls: int, pipelined: int) -> dict[str, float]:
    code = _CHILD.format(here=HERE, calls=calls, pipelined=pipelined)
    res = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=300)
    if res.returncode != 0 or "RESULT" not in res.stdout:
        raise SystemExit(f"mode {mode!r} failed:\n{res.stderr[-3000:]}")
    result: dict[str, float] = json.loads(res.stdout.split("RESULT", 1)[1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--pipelined", type=int, default=10000)
    parser.add_argument("--json", action="store_true", help="print the medians as JSON too")
    args = parser.parse_args()
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    common = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_address[1]}",
              "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    results: dict[str, dict[str, list[float]]] = {m: {"p50": [], "rate": [], "cpu": []} for m in MODES}
    try:
        for i in range(args.rounds):
            order = list(MODES) if i % 2 == 0 else list(reversed(MODES))
            for mode in order:
                r = _run(mode, {**common, **MODES[mode]}, args.calls, args.pipelined)
                results[mode]["p50"].append(r["p50"])
                results[mode]["rate"].append(r["rate"])
                results[mode]["cpu"].append(r["cpu"])
    finally:
        sink.shutdown()
        sink.server_close()
    base_p50 = statistics.median(results["off"]["p50"])
    base_rate = statistics.median(results["off"]["rate"])
    base_cpu = statistics.median(results["off"]["cpu"])
    rows = {}
    print(f"{'mode':<15} {'call p50':>10} {'vs off':>7} {'pipelined':>12} {'vs off':>7} {'client CPU/call':>16} "
          f"{'vs off':>7}   [p50 range; rate range]")
    for mode, r in results.items():
        p50, rate, cpu = statistics.median(r["p50"]), statistics.median(r["rate"]), statistics.median(r["cpu"])
        rows[mode] = {"p50_us": p50 * 1e6, "p50_ratio": p50 / base_p50, "rate": rate, "rate_ratio": rate / base_rate,
                      "p50_range_us": [min(r["p50"]) * 1e6, max(r["p50"]) * 1e6], "rate_range": [min(r["rate"]),
                                                                                                max(r["rate"])]}
        rows[mode].update(cpu_us=cpu * 1e6, cpu_ratio=cpu / base_cpu)
        print(f"{mode:<15} {p50 * 1e6:>8.1f}us {p50 / base_p50:>7.3f} {rate:>10,.0f}/s {rate / base_rate:>7.3f}"
              f" {cpu * 1e6:>14.1f}us {cpu / base_cpu:>7.3f}"
              f"   [{min(r['p50']) * 1e6:.0f}-{max(r['p50']) * 1e6:.0f} us; "
              f"{min(r['rate']):,.0f}-{max(r['rate']):,.0f}/s]")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
