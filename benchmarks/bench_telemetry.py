"""What telemetry costs a call (issue 35's overhead table): off, metrics on, tracing at 1 % and at 100 %.

Each mode runs in its own client process (the settings are read when a process starts), with
one actor on one proc: sequential ``call_one().get()`` (p50) and pipelined calls (calls/s, and
the CPU time per call of the client's process and of the actor's). The modes take turns,
round after round, so they share the machine's state; the table gives each mode's median over
the rounds and, per measure, the median (and range) of its ratios to the ``off`` run of the
same round: on a machine whose speed drifts between rounds, pairs cancel the drift.

Metrics export every second to an OTLP/HTTP receiver in this process that answers 200 at
once (a collector that keeps up); spans go to every subscriber the settings turn on (the
host's telemetry store by default).

``--paired``: one client and one actor, started with every part on, switch their per-call
telemetry between the modes (``_telemetry_toggle.interleaved``): each round measures every
mode once, in short blocks (200 sequential calls, 5 000 pipelined), in an order that turns
by one each round. On this 2-core VM a fresh client's speed alone varies by 20 % or more from
one process to the next, and blocks taken a second apart by ±30 %: more than the costs
measured. Interleaved blocks of every mode see the same machine, so each mode's p50 (over
every call of every round) and rate (over every block) can be compared; the range given with
each ratio is the same ratio in each third of the rounds, a measure of how far it can be
trusted. A fifth mode, ``off, again``, is ``off`` measured again in its own blocks: its ratio to
``off`` is what the method reads where there is no difference (±4 % for rates, ±7 % for p50 in
runs here). What runs on a timer (the metric export every second, the span store's flush) runs
in every mode, so this measures what the call path pays, not the exporter.

Run: ``python benchmarks/bench_telemetry.py [--rounds 3] [--calls 2000] [--pipelined 10000] [--json]``, or
``... --paired [--rounds 45] [--calls 200] [--pipelined 5000]``.
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

#: A client's program: ``{actor}`` (a ``bench_actors`` class) on one proc, warmed up, then ``{measurement}``
#: (a call of ``_telemetry_toggle``'s) printed as JSON.
_CHILD = r"""
import json, sys
sys.path.insert(0, {here!r})
from bench_actors import {actor}
from _telemetry_toggle import interleaved, measure
from tetrarch import this_host

procs = this_host().spawn_procs(per_host={{"gpus": 1}})
mesh = procs.spawn("noop", {actor})
mesh.initialized.get()
for _ in range(500):
    mesh.noop.call_one().get()
result = {measurement}
procs.stop().get()
print("RESULT", json.dumps(result), flush=True)
"""


#: ``--paired``: each mode as ``(metrics, trace sample)``.
PAIRED: dict[str, tuple[bool, float]] = {"off": (False, 0.0), "metrics": (True, 0.0), "tracing 1 %": (False, 0.01),
                                         "tracing 100 %": (False, 1.0), "off, again": (False, 0.0)}


def _child(code: str, env: dict[str, str], timeout: float, what: str) -> Any:
    """What the client ``code`` printed after ``RESULT`` (JSON), run with ``env`` added to ours."""
    res = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=timeout)
    if res.returncode != 0 or "RESULT" not in res.stdout:
        raise SystemExit(f"{what} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.split("RESULT", 1)[1])


def _run_paired(env: dict[str, str], rounds: int, calls: int, pipelined: int) -> dict[str, dict[str, Any]]:
    """The paired run's rows (:func:`_pooled`)."""
    code = _CHILD.format(here=HERE, actor="TelemetryNoop",
                         measurement=f"interleaved(mesh, {PAIRED!r}, {rounds}, {calls}, {pipelined})")
    every_part_on = {"TETRARCH_METRICS": "1", "OTEL_METRIC_EXPORT_INTERVAL": "1000", "TETRARCH_TRACE_SAMPLE": "1"}
    raw = _child(code, {**env, **every_part_on}, 120 + rounds * 10, "the paired run")
    return {mode: _pooled(records, raw["off"], pipelined) for mode, records in raw.items()}


def _pooled(records: list[dict[str, Any]], off: list[dict[str, Any]], pipelined: int) -> dict[str, Any]:
    """One mode's measures over all its rounds (``_telemetry_toggle.interleaved``'s records): the p50 of
    every sequential call, and the pipelined rate and CPU per call over every block; per measure, its ratio
    to ``off`` over all rounds, and the lowest and highest of that ratio in each third of the rounds."""
    def measures(recs: list[dict[str, Any]]) -> dict[str, float]:
        calls = pipelined * len(recs)
        return {"p50": statistics.median(t for r in recs for t in r["times"]),
                "rate": calls / sum(r["seconds"] for r in recs),
                "cpu": sum(r["cpu"] for r in recs) / calls, "actor_cpu": sum(r["actor_cpu"] for r in recs) / calls}

    third = max(1, len(records) // 3)
    parts = [slice(i, i + third) for i in range(0, len(records) - third + 1, third)]
    row: dict[str, Any] = measures(records)
    whole_off = measures(off)
    in_parts = [(measures(records[s]), measures(off[s])) for s in parts]
    for key in list(row):
        ratios = [mine[key] / base[key] for mine, base in in_parts]
        row[key + "_ratio"] = (row[key] / whole_off[key], min(ratios), max(ratios))
    return row


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


def _run(mode: str, env: dict[str, str], calls: int, pipelined: int) -> dict[str, float]:
    code = _CHILD.format(here=HERE, actor="Noop", measurement=f"measure(mesh, {calls}, {pipelined})")
    result: dict[str, float] = _child(code, env, 300, f"mode {mode!r}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help="3, or 45 with --paired")
    parser.add_argument("--calls", type=int, help="sequential calls a round: 2000, or 200 with --paired")
    parser.add_argument("--pipelined", type=int, help="pipelined calls a round: 10000, or 5000 with --paired")
    parser.add_argument("--json", action="store_true", help="print the medians as JSON too")
    parser.add_argument("--paired", action="store_true",
                        help="one client and actor switching modes between rounds (see the module's docstring)")
    args = parser.parse_args()
    paired_defaults = {"rounds": 45, "calls": 200, "pipelined": 5000}
    plain_defaults = {"rounds": 3, "calls": 2000, "pipelined": 10000}
    for key, value in (paired_defaults if args.paired else plain_defaults).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    common = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_address[1]}",
              "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    keys = ("p50", "rate", "cpu", "actor_cpu")
    results: dict[str, dict[str, list[float]]] = {m: {k: [] for k in keys} for m in MODES}
    rows: dict[str, dict[str, Any]] = {}
    try:
        if args.paired:
            rows = _run_paired(common, args.rounds, args.calls, args.pipelined)
        for i in range(0 if args.paired else args.rounds):
            order = list(MODES) if i % 2 == 0 else list(reversed(MODES))
            for mode in order:
                r = _run(mode, {**common, **MODES[mode]}, args.calls, args.pipelined)
                for k in keys:
                    results[mode][k].append(r[k])
    finally:
        sink.shutdown()
        sink.server_close()
    if not args.paired:
        rows = {mode: _summary(r, results["off"]) for mode, r in results.items()}
    print(f"{'mode':<15} {'call p50':>10} {'vs off':>14} {'pipelined':>11} {'vs off':>14} "
          f"{'client CPU/call':>16} {'vs off':>14} {'actor CPU/call':>15} {'vs off':>14}")
    for mode, row in rows.items():
        cells = [f"{mode:<15}"]
        for key, fmt, width in (("p50", "{:.1f}us", 10), ("rate", "{:,.0f}/s", 11), ("cpu", "{:.1f}us", 16),
                                ("actor_cpu", "{:.1f}us", 15)):
            value, (ratio, low, high) = row[key], row[key + "_ratio"]
            cells.append(fmt.format(value * (1e6 if key != "rate" else 1)).rjust(width))
            cells.append(f"{ratio:.3f} [{low:.2f}-{high:.2f}]".rjust(14))
        print(" ".join(cells))
    if args.paired:
        print(f"{args.rounds} rounds in one client and actor switching modes (--paired): p50 of every sequential "
              f"call ({args.calls} a round), rate and CPU over every pipelined block ({args.pipelined} calls); vs off: "
              "over all rounds [lowest-highest of the same ratio in each third of the rounds]")
    else:
        print(f"medians over {args.rounds} rounds; vs off: the median of each round's ratio to that round's off run "
              "[its range] (pairs taken in the same round cancel the machine's drift between rounds)")
    if args.json:
        print(json.dumps(rows))


def _summary(r: dict[str, list[float]], off: dict[str, list[float]]) -> dict[str, Any]:
    """A mode's medians, and per measure the median and range of its per-round ratios to ``off``."""
    row: dict[str, Any] = {}
    for key, values in r.items():
        ratios = [v / o for v, o in zip(values, off[key], strict=True)]
        row[key] = statistics.median(values)
        row[key + "_ratio"] = (statistics.median(ratios), min(ratios), max(ratios))
    return row


if __name__ == "__main__":
    main()
