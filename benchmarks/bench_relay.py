"""Direct vs relayed mesh calls: where per-host relays start to pay (issue 33, item 2).

For each mesh shape (``hosts x procs per host``, hosts being local host agents of a
``ProcessJob``) it times a broadcast+gather round (``call().get()`` of a no-op) with the
relays off (``relay_min=0``: one message per actor each way) and on (``relay_min=2``:
one message per host each way), rounds of the two interleaved so both see the same
machine. Per mode it prints the median round time and the client's CPU time per round
(what the relays save the client), and the ratio relayed / direct.

Run: ``python benchmarks/bench_relay.py [--shapes 1x4,1x8,1x16,4x4,4x16] [--rounds 200] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))  # bench_actors, for the procs too (the client's sys.path)

from bench_actors import Noop

from tetrarch.config import configured
from tetrarch.job import ProcessJob


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(hosts: int, per_host: int, rounds: int) -> dict[str, Any]:
    job = ProcessJob({"hosts": hosts})
    try:
        procs = job.state().hosts.spawn_procs(per_host={"gpus": per_host}, name="relay-bench")
        mesh = procs.spawn("noop", Noop)
        mesh.initialized.get()
        times: dict[str, list[float]] = {"direct": [], "relayed": []}
        cpu: dict[str, float] = {"direct": 0.0, "relayed": 0.0}
        modes = {"direct": 0, "relayed": 2}
        for minimum in modes.values():  # warm both paths (routes dialed)
            with configured(relay_min=minimum):
                for _ in range(10):
                    mesh.noop.call().get()
        for i in range(rounds):
            for mode in (("direct", "relayed") if i % 2 == 0 else ("relayed", "direct")):
                with configured(relay_min=modes[mode]):
                    c0, t0 = _cpu(), time.perf_counter()
                    mesh.noop.call().get()
                    times[mode].append(time.perf_counter() - t0)
                    cpu[mode] += _cpu() - c0
        out: dict[str, Any] = {"hosts": hosts, "per_host": per_host}
        for mode in modes:
            out[mode] = {"median_s": statistics.median(times[mode]), "cpu_per_round_s": cpu[mode] / rounds}
        out["ratio_time"] = out["relayed"]["median_s"] / out["direct"]["median_s"]
        out["ratio_cpu"] = out["relayed"]["cpu_per_round_s"] / out["direct"]["cpu_per_round_s"]
        return out
    finally:
        job.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="1x4,1x8,1x16,4x4,4x16")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    print(f"{'shape':>6} {'direct ms':>10} {'relayed ms':>11} {'x':>6} {'client CPU direct ms':>21} "
          f"{'relayed ms':>11} {'x':>6}")
    for shape in args.shapes.split(","):
        hosts, per_host = (int(x) for x in shape.split("x"))
        row = measure(hosts, per_host, args.rounds)
        rows.append(row)
        d, r = row["direct"], row["relayed"]
        print(f"{shape:>6} {d['median_s'] * 1e3:10.2f} {r['median_s'] * 1e3:11.2f} {row['ratio_time']:6.2f} "
              f"{d['cpu_per_round_s'] * 1e3:21.2f} {r['cpu_per_round_s'] * 1e3:11.2f} {row['ratio_cpu']:6.2f}",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "cpus": os.cpu_count()}, f, indent=1)


if __name__ == "__main__":
    main()
