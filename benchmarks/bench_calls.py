"""Call latency and pipelined throughput, next to a raw socket baseline from the same run.

    python benchmarks/bench_calls.py [--transport ipc|tcp|zmq] [--calls 2000] [--pipelined 10000] [--window 1000]

Baseline: a child process echoes length-prefixed messages over a plain socket of the
same kind (Unix or TCP loopback; ``_baselines.py``), with the same 2000 sequential round
trips and the same pipelined burst (at most ``--window`` in flight). The ratios say what
tetrarch's actor layer costs on top. ``bench_transports.py`` does this for every transport.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from _baselines import Peer, missing_library

from tetrarch import Actor, endpoint, this_host


class Noop(Actor):
    @endpoint
    def noop(self) -> None:
        return None


def _pcts(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99) - 1]


def raw_baseline(library: str, kind: str, calls: int, pipelined: int, window: int) -> tuple[float, float, float]:
    """p50, p99 and pipelined calls/s of a raw ``library`` echo (``_baselines.Peer``: ``socket``,
    ``zmq`` or ``nng``) over ``kind`` (ipc or tcp), ``window`` messages in flight when pipelining.

    Pipelining keeps at most ``window`` messages unanswered: writing all of them before
    reading any deadlocked once both kernel socket buffers were full (``--pipelined 20000``).
    """
    peer = Peer(library, kind)
    try:
        for _ in range(200):
            peer.roundtrip()
        lat = []
        for _ in range(calls):
            t = time.perf_counter()
            peer.roundtrip()
            lat.append(time.perf_counter() - t)
        t = time.perf_counter()
        peer.pipelined(pipelined, window)
        rate = pipelined / (time.perf_counter() - t)
    finally:
        peer.close()
    p50, p99 = _pcts(lat)
    return p50, p99, rate


def library_baseline(library: str, args: argparse.Namespace) -> tuple[float, float, float] | None:
    """:func:`raw_baseline` of pyzmq or pynng over ipc, or None when the library is missing."""
    if missing_library(library):
        return None
    return raw_baseline(library, "ipc", args.calls, args.pipelined, args.window)


def tetrarch_calls(calls: int, pipelined: int) -> tuple[float, float, float]:
    procs = this_host().spawn_procs(per_host={"procs": 1})
    noop = procs.spawn("noop", Noop).noop
    for _ in range(200):  # warm up connections and code paths
        noop.call_one().get()
    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        noop.call_one().get()
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    futs = [noop.call_one() for _ in range(pipelined)]
    for f in futs:
        f.get()
    rate = pipelined / (time.perf_counter() - t)
    procs.stop().get()
    p50, p99 = _pcts(lat)
    return p50, p99, rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transport", default=os.environ.get("TETRARCH_TRANSPORT", "ipc"),
                    choices=["ipc", "tcp", "zmq", "nng"])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--pipelined", type=int, default=10000)
    ap.add_argument("--window", type=int, default=1000, help="raw baseline: messages in flight when pipelining")
    args = ap.parse_args()
    os.environ["TETRARCH_TRANSPORT"] = args.transport
    # zmq's and nng's addresses default to ipc: their raw socket baseline is a Unix socket,
    # next to the raw library's own
    r50, r99, rrate = raw_baseline("socket", "tcp" if args.transport == "tcp" else "ipc", args.calls,
                                   args.pipelined, args.window)
    z = library_baseline("zmq", args) if args.transport in ("ipc", "zmq") else None
    n = library_baseline("nng", args) if args.transport == "nng" else None
    t50, t99, trate = tetrarch_calls(args.calls, args.pipelined)
    us = 1e6
    print(f"transport: {args.transport}   cores: {os.cpu_count()}   python: {sys.version.split()[0]}")
    print(f"{'':28}{'raw socket':>14}{'tetrarch':>14}{'ratio':>10}")
    print(f"{'call_one p50 (us)':28}{r50 * us:14.1f}{t50 * us:14.1f}{t50 / r50:10.2f}")
    print(f"{'call_one p99 (us)':28}{r99 * us:14.1f}{t99 * us:14.1f}{t99 / r99:10.2f}")
    print(f"{'pipelined (calls/s)':28}{rrate:14.0f}{trate:14.0f}{trate / rrate:10.3f}")
    if z is not None:
        print(f"raw pyzmq DEALER/ROUTER ipc round trip: p50 {z[0] * us:.1f} us, p99 {z[1] * us:.1f} us "
              f"(tetrarch p50 / pyzmq p50 = {t50 / z[0]:.2f})")
    if n is not None:
        print(f"raw pynng pair0 ipc round trip: p50 {n[0] * us:.1f} us, p99 {n[1] * us:.1f} us, "
              f"pipelined {n[2]:.0f}/s (tetrarch p50 / pynng p50 = {t50 / n[0]:.2f})")


if __name__ == "__main__":
    main()
