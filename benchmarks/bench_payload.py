"""Tensors and arrays as endpoint arguments and results, next to memcpy and a raw socket (issue 31).

    python benchmarks/bench_payload.py [--mib 1,64,512] [--repeat 2] [--json]
    python benchmarks/bench_payload.py --threshold [16,64,256,1024,4096]

One table, every figure the best of ``--repeat`` runs (a run of a small size averages
several calls) and, for payloads, given as GB/s and as ratios to two baselines measured
in the same run:

* ``memcpy``: a warm copy between two touched buffers of the same size in this process
  (``numpy.copyto``), what a same-host move can at best approach;
* ``unix``: a raw ``AF_UNIX`` socket moving the same bytes into a reused buffer of a child
  process (benchmarks/bench_large.py's baseline): the wire, with no serialization.

Each group of rows below runs in a fresh client (its ``TETRARCH_*`` environment, which
its procs inherit, set as said) with one proc on this host:

* ``argument`` / ``result``, ``numpy`` and ``torch`` (CPU, float32), for each ``--mib``:
  the client calls an endpoint that returns the payload's length, or one that returns a
  payload the actor prepared beforehand. Three paths:

  - ``same host``: ``TETRARCH_TRANSPORT=ipc`` with the shared-memory path for large
    out-of-band buffers at its defaults (``TETRARCH_SHM_PAYLOADS`` on,
    ``TETRARCH_SHM_MIN_BYTES`` as configured);
  - ``ipc (socket path)``: the same with ``TETRARCH_SHM_PAYLOADS=0``, everything through
    the Unix socket: the "before" of the same-host path, in the same run;
  - ``tcp (socket path)``: ``TETRARCH_TRANSPORT=tcp`` with ``TETRARCH_SHM_PAYLOADS=0``,
    standing for the streaming path between hosts (over loopback here).

* ``already shared``: a torch tensor after ``.share_memory_()`` as an argument (same host).
* ``RDMA read``: ``RDMABuffer.read_into`` of the same size from the actor (same host; the
  backend chosen here, normally shm), for comparison.
* ``small call p50`` / ``pipelined``: a no-op endpoint on ipc with the shared-memory
  path on and off (measured first in those clients): the median latency of 1000
  sequential ``call_one().get()`` after 100 warm-up calls (the lowest median of the
  runs), and calls/s of 2000 ``call_one`` futures issued before any is read (best run):
  the shared-memory path must leave small calls as they were. The two come from two
  clients a minute apart: on a shared machine only a large gap means anything.

``--threshold KIB,...`` (not part of the default run) measures instead a numpy argument
of each size on ipc with the shared-memory path forced for every size
(``TETRARCH_SHM_MIN_BYTES=1``) and off, and says which is faster per size: what
``TETRARCH_SHM_MIN_BYTES`` should default to.

The run warns if it leaves new files in ``/dev/shm``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _payloads import MIB, make_payload, memcpy_s, touch
from _payloads import best_s as _best
from _report import markdown_table as _table
from bench_large import raw_baseline

KIB = 1 << 10
SAME_HOST, IPC_SOCKET, TCP_SOCKET = "same host", "ipc (socket path)", "tcp (socket path)"
# label -> (transport, TETRARCH_SHM_PAYLOADS (None: left at its default), worker cases)
PATHS: dict[str, tuple[str, str | None, str]] = {
    SAME_HOST: ("ipc", None, "payload,shared,rdma,small"),
    IPC_SOCKET: ("ipc", "0", "payload,small"),
    TCP_SOCKET: ("tcp", "0", "payload"),
}
CASE_ORDER = ["memcpy", "unix", "argument", "result", "already shared", "RDMA read", "small call p50", "pipelined"]
PATH_ORDER = ["", SAME_HOST, IPC_SOCKET, TCP_SOCKET]


def _calls(n: int) -> int:
    """Calls per timed run for a payload of ``n`` bytes: several for small sizes, one from 256 MiB."""
    return max(1, min(50, (256 * MIB) // n))


def _call(target: Any, *args: Any, method: str = "call_one") -> Callable[[], Any]:
    """One blocking ``target.call_one(*args).get()`` (or ``target(*args).get()`` with ``method="call"``),
    its result touched (:func:`touch`) when it is an array or tensor."""
    start = target if method == "call" else getattr(target, method)
    return lambda: touch(start(*args).get(timeout=600)) if method != "call" else start(*args).get(timeout=600)


def _emit(**row: Any) -> None:
    print(json.dumps(row), flush=True)


def worker(cases: set[str], sizes: list[int], repeat: int) -> None:
    """Runs in a fresh client (transport and settings from its environment): one JSON line per row.

    ``sizes`` are in bytes.
    """
    from tetrarch import Actor, endpoint, shutdown_context, this_host
    from tetrarch.rdma import RDMABuffer

    class Payloads(Actor):
        def __init__(self) -> None:
            self.ready: Any = None
            self.held: Any = None

        @endpoint
        def noop(self) -> None:
            return None

        @endpoint
        def nbytes(self, data: Any) -> int:
            touch(data)
            return int(data.nbytes)

        @endpoint
        def prepare(self, kind: str, n: int) -> None:
            self.ready = make_payload(kind, n)

        @endpoint
        def give(self) -> Any:
            return self.ready

        @endpoint
        def buffer(self, n: int) -> RDMABuffer:
            self.held = np.ones(n, dtype=np.uint8)
            return RDMABuffer(memoryview(self.held))

    kinds = ("numpy",) if "threshold" in cases else ("numpy", "torch")
    procs = this_host().spawn_procs(per_host={"procs": 1}, name="payload")
    try:
        actor = procs.spawn("payloads", Payloads)
        for kind in kinds:  # connected, the libraries imported on both sides, paths warm
            for n in (4096, 4 * MIB):
                actor.nbytes.call_one(make_payload(kind, n)).get(timeout=600)
                actor.prepare.call_one(kind, n).get(timeout=600)
                actor.give.call_one().get(timeout=600)
        if "small" in cases:  # first, before the large payloads have churned memory
            p50 = float("inf")
            for _ in range(max(repeat, 2)):
                for _ in range(100):
                    actor.noop.call_one().get(timeout=60)
                lat = []
                for _ in range(1000):
                    t = time.perf_counter()
                    actor.noop.call_one().get(timeout=60)
                    lat.append(time.perf_counter() - t)
                p50 = min(p50, statistics.median(lat))
            _emit(case="small call p50", s=p50)

            def pipelined() -> None:
                for f in [actor.noop.call_one() for _ in range(2000)]:
                    f.get(timeout=60)

            _emit(case="pipelined", s=_best(pipelined, max(repeat, 2), 1) / 2000)
        if "threshold" in cases:
            for n in sizes:
                data = make_payload("numpy", n)
                s = _best(_call(actor.nbytes, data), max(repeat, 3),
                          max(5, min(200, (32 * MIB) // n)))
                _emit(case="threshold", n=n, s=s)
        for n in sizes if cases & {"payload", "shared", "rdma"} else []:
            mib, calls = n // MIB, _calls(n)
            for kind in kinds if "payload" in cases else ():
                data = make_payload(kind, n)
                s = _best(_call(actor.nbytes, data), repeat, calls)
                _emit(case="argument", kind=kind, mib=mib, s=s)
                del data
                actor.prepare.call_one(kind, n).get(timeout=600)
                s = _best(_call(actor.give), repeat, calls)
                actor.prepare.call_one(kind, 0).get(timeout=600)  # the actor lets go of it
                _emit(case="result", kind=kind, mib=mib, s=s)
            if "shared" in cases:
                data = make_payload("torch", n).share_memory_()
                s = _best(_call(actor.nbytes, data), repeat, calls)
                _emit(case="already shared", kind="torch", mib=mib, s=s)
                del data
            if "rdma" in cases:
                buf = actor.buffer.call_one(n).get(timeout=600)
                dst = memoryview(np.zeros(n, dtype=np.uint8))  # type: ignore[arg-type]
                s = _best(_call(buf.read_into, dst, method="call"), max(repeat, 2), calls)
                _emit(case="RDMA read", kind=buf.backend, mib=mib, s=s)
                del buf, dst
    finally:
        procs.stop().get(timeout=60)
        shutdown_context().get(timeout=60)


def run_worker(transport: str, shm: str | None, cases: str, sizes: str, repeat: int,
               extra: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Rows from a fresh client process with ``TETRARCH_TRANSPORT=transport`` and the shm settings given."""
    env = {**os.environ, "TETRARCH_TRANSPORT": transport, **(extra or {})}
    env.pop("TETRARCH_SHM_PAYLOADS", None)
    if shm is not None:
        env["TETRARCH_SHM_PAYLOADS"] = shm
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", cases, "--sizes", sizes, "--repeat", str(repeat)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        print(f"{transport} ({cases}): the worker failed ({out.returncode}):\n{out.stderr[-2000:]}", file=sys.stderr)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _shm_files() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def payload_table(mibs: list[int], repeat: int, as_json: bool) -> None:
    """The default run: baselines, then one worker per path."""
    sizes = ",".join(str(m * MIB) for m in mibs)
    memcpy = {m: memcpy_s(m * MIB, repeat) for m in mibs}
    unix = {m: raw_baseline("ipc", m * MIB, max(repeat, 3 if m >= 256 else 10), fresh=False) for m in mibs}
    rows: list[dict[str, Any]] = []
    for m in mibs:
        rows.append({"case": "memcpy", "kind": "", "path": "", "mib": m, "s": memcpy[m]})
        rows.append({"case": "unix", "kind": "", "path": "", "mib": m, "s": unix[m]})
    for label, (transport, shm, cases) in PATHS.items():
        print(f"{label}: running ...", file=sys.stderr, flush=True)
        rows += [{"kind": "", **row, "path": label} for row in run_worker(transport, shm, cases, sizes, repeat)]
    for row in rows:
        m, s = row.get("mib", 0), row["s"]
        if row["case"] == "small call p50":
            row.update(value=s * 1e6, unit="µs")
        elif row["case"] == "pipelined":
            row.update(value=1 / s, unit="calls/s")
        else:
            row.update(value=m * MIB / s / 1e9, unit="GB/s", x_memcpy=memcpy[m] / s, x_unix=unix[m] / s)
    rows.sort(key=lambda r: (r.get("mib", 1 << 30), CASE_ORDER.index(r["case"]),
                             PATH_ORDER.index(r["path"]) if r["path"] in PATH_ORDER else 9, r["kind"]))
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    cells = []
    for r in rows:
        value = f"{r['value']:.2f} GB/s" if r["unit"] == "GB/s" else f"{r['value']:.0f} {r['unit']}"
        ratios = [f"{r['x_memcpy']:.3f}", f"{r['x_unix']:.3f}"] if "x_memcpy" in r else ["", ""]
        cells.append([r["case"], r["kind"], r["path"], str(r.get("mib", "")), value, *ratios])
    print(f"cores: {os.cpu_count()}   python: {sys.version.split()[0]}   repeat: {repeat}")
    print(_table(["case", "kind", "path", "MiB", "figure", "x memcpy", "x unix"], cells))


def threshold_table(kibs: list[int], repeat: int, as_json: bool) -> None:
    """A numpy argument per size on ipc, shared-memory path forced on and off."""
    sizes = ",".join(str(k * KIB) for k in kibs)
    on = run_worker("ipc", "1", "threshold", sizes, repeat, {"TETRARCH_SHM_MIN_BYTES": "1"})
    off = run_worker("ipc", "0", "threshold", sizes, repeat)
    by_n = {(r["n"], "on"): r["s"] for r in on} | {(r["n"], "off"): r["s"] for r in off}
    rows = []
    for k in kibs:
        s_on, s_off = by_n.get((k * KIB, "on")), by_n.get((k * KIB, "off"))
        if s_on is None or s_off is None:
            continue
        rows.append({"kib": k, "shm_us": s_on * 1e6, "socket_us": s_off * 1e6, "shm_gbps": k * KIB / s_on / 1e9,
                     "socket_gbps": k * KIB / s_off / 1e9, "faster": "shm" if s_on < s_off else "socket"})
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    print(f"numpy argument on ipc, best of {max(repeat, 3)} runs; shm: TETRARCH_SHM_MIN_BYTES=1, "
          f"socket: TETRARCH_SHM_PAYLOADS=0")
    cells = [[str(r["kib"]), f"{r['shm_us']:.0f}", f"{r['socket_us']:.0f}", f"{r['shm_gbps']:.2f}",
              f"{r['socket_gbps']:.2f}", f"{r['socket_us'] / r['shm_us']:.2f}", r["faster"]] for r in rows]
    header = ["KiB", "shm µs", "socket µs", "shm GB/s", "socket GB/s", "socket/shm", "faster"]
    print(_table(header, cells, left=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", default="1,64,512", help="payload sizes in MiB, comma-separated")
    parser.add_argument("--repeat", type=int, default=2, help="runs per case; the best counts")
    parser.add_argument("--threshold", nargs="?", const="16,64,256,1024,4096", metavar="KIB",
                        help="instead: shm path on/off per numpy argument size in KiB (default 16,64,256,1024,4096)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(set(args.worker.split(",")), [int(n) for n in args.sizes.split(",") if n], args.repeat)
        return
    before, t = _shm_files(), time.perf_counter()
    if args.threshold:
        threshold_table([int(k) for k in args.threshold.split(",") if k], args.repeat, args.json)
    else:
        payload_table([int(m) for m in args.mib.split(",") if m], args.repeat, args.json)
    print(f"took {time.perf_counter() - t:.0f} s", file=sys.stderr)
    left = _shm_files() - before
    if left:
        print(f"warning: new files left in /dev/shm: {sorted(left)}", file=sys.stderr)


if __name__ == "__main__":
    main()
