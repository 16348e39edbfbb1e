"""Tensors and arrays as endpoint arguments and results, next to memcpy and a raw socket (issue 31).

    python benchmarks/bench_payload.py [--mib 1,64,512] [--repeat 2] [--transports ipc,tcp]

One table: for each size, numpy and CPU torch, as an argument (the client calls an
endpoint that returns the payload's length) and as a result (the actor returns a payload
it prepared), on each transport (a fresh client per transport: ``TETRARCH_TRANSPORT``).
Every row gives the best of ``--repeat`` runs as GB/s and as ratios to two baselines
measured in the same run:

* ``memcpy``: a warm copy between two touched buffers of the same size in this process
  (``numpy.copyto``), what a same-host move can at best approach;
* ``unix``: a raw ``AF_UNIX`` socket moving the same bytes into a reused buffer of a child
  process (benchmarks/bench_large.py's baseline): the wire, with no serialization.

The last rows read the same sizes with ``RDMABuffer.read_into`` from an actor on the
same host (the shm backend when it is chosen here), for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
from bench_large import raw_baseline

MIB = 1 << 20


def memcpy_s(n: int, repeat: int) -> float:
    """Best seconds of a warm copy of ``n`` bytes between two touched buffers."""
    src, dst = np.ones(n, dtype=np.uint8), np.zeros(n, dtype=np.uint8)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(max(repeat, 3)):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return best


def _payload(kind: str, n: int) -> Any:
    if kind == "numpy":
        return np.ones(n // 4, dtype=np.float32)
    import torch

    return torch.ones(n // 4, dtype=torch.float32)


def worker(mibs: list[int], repeat: int) -> None:
    """Runs in a fresh client (its transport from the environment): prints one JSON row per case."""
    from tetrarch import Actor, endpoint, this_host
    from tetrarch.rdma import RDMABuffer

    class Payloads(Actor):
        def __init__(self) -> None:
            self.ready: Any = None
            self.held: Any = None

        @endpoint
        def nbytes(self, data: Any) -> int:
            return int(data.nbytes)

        @endpoint
        def prepare(self, kind: str, n: int) -> None:
            self.ready = _payload(kind, n)

        @endpoint
        def give(self) -> Any:
            return self.ready

        @endpoint
        def buffer(self, n: int) -> RDMABuffer:
            self.held = np.ones(n, dtype=np.uint8)
            return RDMABuffer(memoryview(self.held))

    procs = this_host().spawn_procs(per_host={"procs": 1}, name="payload")
    actor = procs.spawn("payloads", Payloads)
    for kind in ("numpy", "torch"):  # connected, both libraries imported on both sides, paths warm
        actor.nbytes.call_one(_payload(kind, 4096)).get(timeout=600)
        actor.prepare.call_one(kind, 4096).get(timeout=600)
        actor.give.call_one().get(timeout=600)
    rdma = os.environ.get("BENCH_RDMA") == "1"
    try:
        for mib in mibs:
            n = mib * MIB
            for kind in ("numpy", "torch"):
                data = _payload(kind, n)
                best = float("inf")
                for _ in range(repeat):
                    t = time.perf_counter()
                    actor.nbytes.call_one(data).get(timeout=600)
                    best = min(best, time.perf_counter() - t)
                print(json.dumps({"case": "argument", "kind": kind, "mib": mib, "s": best}), flush=True)
                del data
                best = float("inf")
                for _ in range(repeat):
                    actor.prepare.call_one(kind, n).get(timeout=600)
                    t = time.perf_counter()
                    got = actor.give.call_one().get(timeout=600)
                    best = min(best, time.perf_counter() - t)
                    del got
                print(json.dumps({"case": "result", "kind": kind, "mib": mib, "s": best}), flush=True)
            if rdma:
                buf = actor.buffer.call_one(n).get(timeout=600)
                dst = np.zeros(n, dtype=np.uint8)
                best = float("inf")
                for _ in range(max(repeat, 2)):
                    t = time.perf_counter()
                    buf.read_into(memoryview(dst)).get(timeout=600)
                    best = min(best, time.perf_counter() - t)
                print(json.dumps({"case": "rdma read", "kind": buf.backend, "mib": mib, "s": best}), flush=True)
    finally:
        procs.stop().get(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", default="1,64,512", help="payload sizes in MiB, comma-separated")
    parser.add_argument("--repeat", type=int, default=2, help="runs per case; the best counts")
    parser.add_argument("--transports", default="ipc,tcp", help="transports, comma-separated")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    mibs = [int(m) for m in args.mib.split(",") if m]
    if args.worker:
        worker(mibs, args.repeat)
        return
    memcpy = {m: memcpy_s(m * MIB, args.repeat) for m in mibs}
    unix = {m: raw_baseline("ipc", m * MIB, max(args.repeat, 3), fresh=False) for m in mibs}
    print(f"{'case':<10} {'kind':<6} {'transport':<9} {'MiB':>5} {'GB/s':>7} {'x memcpy':>9} {'x unix':>7}")
    for m in mibs:
        n = m * MIB
        print(f"{'memcpy':<10} {'':<6} {'':<9} {m:>5} {n / memcpy[m] / 1e9:>7.2f} {1.0:>9.2f} "
              f"{unix[m] / memcpy[m]:>7.2f}")
        print(f"{'unix':<10} {'':<6} {'':<9} {m:>5} {n / unix[m] / 1e9:>7.2f} {memcpy[m] / unix[m]:>9.2f} {1.0:>7.2f}")
    for i, transport in enumerate(t for t in args.transports.split(",") if t):
        env = {**os.environ, "TETRARCH_TRANSPORT": transport, "BENCH_RDMA": "1" if i == 0 else "0"}
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--mib", args.mib, "--repeat",
               str(args.repeat)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            print(f"{transport}: the worker failed ({out.returncode}):\n{out.stderr[-2000:]}", file=sys.stderr)
            continue
        for line in out.stdout.splitlines():
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            m, s = row["mib"], row["s"]
            where = transport if row["case"] != "rdma read" else "same host"
            print(f"{row['case']:<10} {row['kind']:<6} {where:<9} {m:>5} {m * MIB / s / 1e9:>7.2f} "
                  f"{memcpy[m] / s:>9.3f} {unix[m] / s:>7.3f}")


if __name__ == "__main__":
    main()
