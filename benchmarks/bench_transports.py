"""Every transport next to its raw library, measured in the same run (``make bench-transports``).

    python benchmarks/bench_transports.py [--transports ipc,tcp,zmq,nng] [--quick]
        [--calls 2000] [--pipelined 20000] [--window 1000] [--rounds 200] [--mib 64,512]
        [--repeat 1]

Per transport (default: every transport ``tetrarch plugins`` shows available; one that
is not is listed with its reason), in this order:

* tetrarch, in a fresh client with ``TETRARCH_TRANSPORT=<name>`` (one transport per
  process): ``call_one`` latency p50/p99 of a no-op endpoint on one proc; pipelined
  calls/s (all futures first, then every ``get``); an 8-proc broadcast+gather round
  (``call().get()`` on a mesh of 8, p50); a numpy ``uint8`` argument of each ``--mib``
  size to an endpoint that returns its length (best of 2).
* the raw library (``_baselines.py``; never tetrarch or a plugin): a plain socket of the
  same scheme for ipc/tcp, pyzmq DEALER/ROUTER for zmq, pynng Pair0 for nng, over the
  scheme the tetrarch run listened on: the same round trips, the same number of
  pipelined messages (``--window`` in flight), 8 peer processes answering each round,
  and the same payloads (acknowledged with one byte).

Ratios are tetrarch / raw (times: lower is better; calls/s: higher is better).
``--quick`` (about a minute): fewer calls, 64 MiB only.

``--repeat N`` runs the whole comparison N times, transports interleaved, and prints per
figure the median over the runs, the median of the per-run ratios (each tetrarch figure
against the raw one of the same run) and their range: on a shared VM one run's figures
move by 10-20 % with the hour, and a single run can land on either side of a target.
Each table ends with the issue's targets for a plugin transport (p50 at most
:data:`TARGET_P50_RATIO` x raw, at least :data:`TARGET_RATE` pipelined calls/s, an 8-proc
round of at most :data:`TARGET_ROUND_S`), checked against those medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import _baselines
from _timing import timed as _timed

Result = dict[str, float]
US, MS = 1e6, 1e3
#: The targets for a plugin transport (docs/performance.md): p50 against the raw library's,
#: pipelined calls/s, the 8-proc round's p50 in seconds.
TARGET_P50_RATIO = 1.3
TARGET_RATE = 30_000.0
TARGET_ROUND_S = 1e-3


def _pcts(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return samples[len(samples) // 2], samples[max(0, int(len(samples) * 0.99) - 1)]


def _array(mib: int) -> Any:
    import numpy as np

    arr = np.empty(mib << 20, dtype=np.uint8)
    arr.fill(1)  # touched: page faults are no part of the measure
    return arr


# ---------------------------------------------------------------- tetrarch (a worker process)


def tetrarch_worker(args: argparse.Namespace) -> Result:
    """The tetrarch figures in this process (its transport is ``TETRARCH_TRANSPORT``)."""
    from bench_actors import Noop, Sink

    from tetrarch import this_host
    from tetrarch._runtime.process._root import get_root

    out: Result = {}
    one = this_host().spawn_procs(per_host={"procs": 1})
    noop = one.spawn("noop", Noop).noop
    for _ in range(200):  # warm up connections and code paths
        noop.call_one().get()
    out["p50"], out["p99"] = _pcts(_timed(lambda: noop.call_one().get(), args.calls))
    t = time.perf_counter()
    futs = [noop.call_one() for _ in range(args.pipelined)]
    for f in futs:
        f.get()
    out["rate"] = args.pipelined / (time.perf_counter() - t)
    sink = one.spawn("sink", Sink)
    sink.nbytes.call_one(b"warm").get()
    for mib in args.mib:
        data = _array(mib)
        out[f"mib{mib}"] = min(_timed(lambda data=data: sink.nbytes.call_one(data).get(), 2))
        del data
    one.stop().get()
    eight = this_host().spawn_procs(per_host={"procs": 8})
    mesh = eight.spawn("noop8", Noop).noop
    for _ in range(20):
        mesh.call().get()
    out["round"] = statistics.median(_timed(lambda: mesh.call().get(), args.rounds))
    eight.stop().get()
    out["address"] = get_root().router.address  # type: ignore[assignment]
    return out


def run_worker(transport: str, args: argparse.Namespace) -> Result:
    """:func:`tetrarch_worker` in a fresh client using ``transport``."""
    argv = [sys.executable, __file__, "--worker", "--calls", str(args.calls), "--pipelined", str(args.pipelined),
            "--rounds", str(args.rounds), "--mib", ",".join(map(str, args.mib))]
    env = {**os.environ, "TETRARCH_TRANSPORT": transport}
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.worker_timeout)
    if res.returncode != 0:
        raise RuntimeError(f"the tetrarch run on {transport} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- raw baselines


def raw_figures(lib: str, scheme: str, args: argparse.Namespace) -> Result:
    out: Result = {}
    peer = _baselines.Peer(lib, scheme)
    try:
        for _ in range(200):
            peer.roundtrip()
        out["p50"], out["p99"] = _pcts(_timed(peer.roundtrip, args.calls))
        t = time.perf_counter()
        peer.pipelined(args.pipelined, args.window)
        out["rate"] = args.pipelined / (time.perf_counter() - t)
        for mib in args.mib:
            data = _array(mib)
            peer.payload(data)  # the peer's buffer grows once
            out[f"mib{mib}"] = min(_timed(lambda data=data: peer.payload(data), 2))
            del data
    finally:
        peer.close()
    peers = [_baselines.Peer(lib, scheme) for _ in range(8)]
    try:
        def round_trip() -> None:
            for p in peers:
                p.send(b"x" * 8)
            for p in peers:
                p.recv()

        for _ in range(20):
            round_trip()
        out["round"] = statistics.median(_timed(round_trip, args.rounds))
    finally:
        for p in peers:
            p.close()
    return out


# ---------------------------------------------------------------- report


def _rows(mibs: list[int]) -> list[tuple[str, str, float, str]]:
    rows = [("call_one p50 (us)", "p50", US, "t"), ("call_one p99 (us)", "p99", US, "t"),
            ("pipelined (calls/s)", "rate", 1.0, "r"), ("8-proc round p50 (ms)", "round", MS, "t")]
    return rows + [(f"{m} MiB numpy arg (ms)", f"mib{m}", MS, "t") for m in mibs]


def report(transport: str, lib: str, scheme: str, mine: list[Result] | None, raw: list[Result],
           mibs: list[int]) -> None:
    """One table over the runs in ``raw`` (and ``mine``, run for run); ``mine`` None: the
    transport cannot run here, the raw library's column alone."""
    base = {"socket": f"raw {'AF_UNIX' if scheme == 'ipc' else 'TCP'} socket", "zmq": "raw pyzmq DEALER/ROUTER",
            "nng": "raw pynng Pair0"}[lib]
    where = f"tetrarch at {mine[0]['address']}" if mine else "tetrarch cannot run on it here (see above)"
    runs = f"; medians of {len(raw)} runs" if len(raw) > 1 else ""
    print(f"\n== {transport}: {where}; baseline: {base} over {scheme}://{runs}")
    spread = len(raw) > 1 and mine is not None
    print(f"{'':26}{'raw':>12}{'tetrarch':>12}{'ratio':>9}" + (f"{'ratio range':>16}" if spread else ""))
    med = statistics.median
    for label, key, scale, how in _rows(mibs):
        fmt = "{:12.0f}" if how == "r" else ("{:12.1f}" if scale == US else "{:12.2f}")
        cells = fmt.format(med(r[key] for r in raw) * scale)
        if mine is not None:
            ratios = [m[key] / r[key] for m, r in zip(mine, raw, strict=True)]
            cells += fmt.format(med(m[key] for m in mine) * scale) + f"{med(ratios):9.2f}"
            if spread:
                cells += f"{min(ratios):9.2f} - {max(ratios):4.2f}"
        print(f"{label:26}{cells}")
    if mine is not None:
        print(targets(mine, raw))


def targets(mine: list[Result], raw: list[Result]) -> str:
    """The plugin-transport targets checked against the medians over the runs."""
    med = statistics.median
    p50 = med(m["p50"] / r["p50"] for m, r in zip(mine, raw, strict=True))
    rate = med(m["rate"] for m in mine)
    rnd = med(m["round"] for m in mine)

    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    held = [sum(m["round"] <= TARGET_ROUND_S for m in mine), sum(m["rate"] >= TARGET_RATE for m in mine)]
    runs = f" (round held in {held[0]}/{len(mine)} runs, pipelined in {held[1]}/{len(mine)})" if len(mine) > 1 else ""
    return (f"plugin-transport targets: p50 <= {TARGET_P50_RATIO}x raw: {p50:.2f}x {mark(p50 <= TARGET_P50_RATIO)}; "
            f"pipelined >= {TARGET_RATE / 1e3:.0f} k/s: {rate / 1e3:.1f} k {mark(rate >= TARGET_RATE)}; "
            f"8-proc round <= {TARGET_ROUND_S * MS:.0f} ms: {rnd * MS:.2f} ms {mark(rnd <= TARGET_ROUND_S)}{runs}")


def _transports(asked: str | None) -> tuple[list[str], list[str], list[str]]:
    """The transports to run, why not for the others, and those of them whose raw library can still run."""
    from tetrarch._plugins import BackendKind, Registry, Status
    from tetrarch._plugins._rows import is_absent

    rows = {r.name: r for r in Registry().statuses(BackendKind.TRANSPORT)}
    names = [n.strip() for n in asked.split(",") if n.strip()] if asked else sorted(rows, key=lambda n: (
        rows[n].distribution != "tetrarch", n))
    run, skipped, raw_only = [], [], []
    for name in names:
        row = rows.get(name)
        if row is None:
            skipped.append(f"{name}: no such transport (known: {', '.join(sorted(rows))})")
        elif row.status is not Status.AVAILABLE:
            if asked or not is_absent(row):
                skipped.append(f"{name}: {row.status.value}: " + "; ".join(x for x in (row.reason, row.hint) if x))
            if _baselines.library_of(name) != "socket" and not _baselines.missing_library(_baselines.library_of(name)):
                raw_only.append(name)
        else:
            run.append(name)
    return run, skipped, raw_only


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transports", help="comma-separated names (default: every available transport)")
    ap.add_argument("--quick", action="store_true", help="fewer calls and 64 MiB only (about a minute)")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--pipelined", type=int, default=20000)
    ap.add_argument("--window", type=int, default=1000, help="raw baselines: calls in flight when pipelining")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--mib", default="64,512", help="payload sizes in MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the whole comparison this many times and report medians (see above)")
    ap.add_argument("--worker-timeout", type=float, default=240.0,
                    help="seconds one transport's tetrarch run may take before it is reported FAILED")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.calls, args.pipelined, args.rounds, args.mib = 500, 5000, 50, "64"
    args.mib = [int(m) for m in str(args.mib).split(",") if m.strip()]
    if args.worker:
        print(json.dumps(tetrarch_worker(args)))
        return 0
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, not {args.repeat}")
    run, skipped, raw_only = _transports(args.transports)
    print(f"cores: {os.cpu_count()}   python: {sys.version.split()[0]}   calls: {args.calls}   pipelined: "
          f"{args.pipelined}   rounds: {args.rounds}" + (f"   runs: {args.repeat}" if args.repeat > 1 else ""))
    for line in skipped:
        print(f"skipped {line}")
    status = 0
    mine: dict[str, list[Result]] = {t: [] for t in run}
    raw: dict[str, list[Result]] = {t: [] for t in run}
    failed: set[str] = set()
    for n in range(args.repeat):
        if args.repeat > 1:
            print(f"run {n + 1}/{args.repeat} ...", flush=True)
        for transport in run:
            if transport in failed:
                continue
            lib = _baselines.library_of(transport)
            try:
                figures = run_worker(transport, args)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"\n== {transport}: FAILED: {exc}", flush=True)
                failed.add(transport)
                status = 1
                continue
            if _baselines.missing_library(lib):
                mine[transport].append(figures)
                continue
            scheme = str(figures["address"]).partition("://")[0].rpartition("+")[2]
            try:
                baseline = raw_figures(lib, scheme, args)
            except (ConnectionError, RuntimeError) as exc:
                print(f"\n== {transport}: raw {lib} baseline FAILED: {exc}", flush=True)
                failed.add(transport)
                status = 1
                continue
            mine[transport].append(figures)
            raw[transport].append(baseline)
            if args.repeat == 1:
                report(transport, lib, scheme, mine[transport], raw[transport], args.mib)
                sys.stdout.flush()
    for transport in run:
        lib = _baselines.library_of(transport)
        why = _baselines.missing_library(lib)
        if not mine[transport]:
            continue  # failed in its first run
        if why:
            print(f"\n== {transport}: no raw baseline: {why}")
        elif args.repeat > 1:
            scheme = str(mine[transport][0]["address"]).partition("://")[0].rpartition("+")[2]
            report(transport, lib, scheme, mine[transport], raw[transport], args.mib)
    for transport in raw_only:  # the library's own figures, for when its transport lands
        lib = _baselines.library_of(transport)
        report(transport, lib, "ipc", None, [raw_figures(lib, "ipc", args)], args.mib)
    return status


if __name__ == "__main__":
    sys.exit(main())
