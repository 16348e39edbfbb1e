"""The admin server's cost on calls while nobody asks it anything (issue 34's acceptance).

One client, one actor on one proc: rounds of sequential ``call_one().get()`` (p50) and of
pipelined calls (calls/s), alternating the admin server off and on (``tetrarch.admin.serve()``
then ``stop()``) so both see the same machine. Prints each mode's median over the rounds and
the ratio on/off.

Run: ``python benchmarks/bench_admin.py [--rounds 6] [--calls 2000] [--pipelined 10000]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))  # bench_actors, for the procs too (the client's sys.path)

from bench_actors import Noop

import tetrarch.admin as admin
from tetrarch import this_host


def _p50(mesh: object, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        mesh.noop.call_one().get()  # type: ignore[attr-defined]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _pipelined(mesh: object, n: int) -> float:
    t0 = time.perf_counter()
    futures = [mesh.noop.call_one() for _ in range(n)]  # type: ignore[attr-defined]
    for f in futures:
        f.get()
    return n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--pipelined", type=int, default=10000)
    args = parser.parse_args()
    os.environ.setdefault("TETRARCH_ADMIN_DIR", tempfile.mkdtemp(prefix="tetrarch-admin-bench-"))
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("noop", Noop)
    mesh.initialized.get()
    _p50(mesh, 500)
    results: dict[str, dict[str, list[float]]] = {m: {"p50": [], "rate": []} for m in ("off", "on")}
    for i in range(args.rounds):
        for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
            server = admin.serve() if mode == "on" else None
            results[mode]["p50"].append(_p50(mesh, args.calls))
            results[mode]["rate"].append(_pipelined(mesh, args.pipelined))
            if server is not None:
                server.stop()
    off, on = results["off"], results["on"]
    p50_off, p50_on = statistics.median(off["p50"]), statistics.median(on["p50"])
    rate_off, rate_on = statistics.median(off["rate"]), statistics.median(on["rate"])
    print(f"call p50: off {p50_off * 1e6:.1f} us, on {p50_on * 1e6:.1f} us, on/off {p50_on / p50_off:.3f}")
    print(f"pipelined: off {rate_off:,.0f}/s, on {rate_on:,.0f}/s, on/off {rate_on / rate_off:.3f}")
    procs.stop().get()


if __name__ == "__main__":
    main()
