"""What Python work costs on a sequential path, against what it costs in a hot loop.

    python benchmarks/bench_amplification.py [--lib zmq|socket|nng] [--calls 4000] [--work 0,20,40]

A raw round trip of the baselines' library (``_baselines.Peer``, no tetrarch), followed
each time by ``WORK`` iterations of a small pickling loop. For each amount it prints the
loop's cost measured hot (back to back), and the round trip's p50 and the client's CPU per
round trip with it. On a machine where a sleeping thread's CPU halts (a VM with the
``haltpoll`` cpuidle driver), the added p50 and CPU are several times the hot cost:
docs/performance.md ("What is left between a sequential call and the raw library").
"""

from __future__ import annotations

import argparse
import pickle
import time

import _baselines


def work(n: int) -> int:
    total = 0
    for i in range(n):
        total += len(pickle.dumps((i, "abc", None)))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default="zmq", choices=["zmq", "socket", "nng"])
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--work", default="0,20,40", help="pickling iterations after each round trip, comma-separated")
    args = ap.parse_args()
    for n in (int(w) for w in args.work.split(",")):
        start = time.perf_counter()
        work(n * 1000)
        hot = (time.perf_counter() - start) / 1000
        peer = _baselines.Peer(args.lib, "ipc")
        try:
            for _ in range(500):
                peer.roundtrip()
            lat = []
            cpu = time.process_time()
            for _ in range(args.calls):
                t = time.perf_counter()
                peer.roundtrip()
                work(n)
                lat.append(time.perf_counter() - t)
            cpu = time.process_time() - cpu
        finally:
            peer.close()
        lat.sort()
        print(f"{args.lib}: {n:3d} iterations ({hot * 1e6:5.1f} us hot): round trip + work p50 "
              f"{lat[len(lat) // 2] * 1e6:6.0f} us, client CPU {cpu / args.calls * 1e6:5.0f} us per round trip")


if __name__ == "__main__":
    main()
