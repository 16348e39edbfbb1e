"""CPU time per call in the client and in the proc, next to the wall time (one transport).

    TETRARCH_TRANSPORT=zmq python benchmarks/bench_cpu.py [--calls 3000] [--pipelined 20000]

Sequential ``call_one().get()`` and a pipelined burst to a no-op endpoint in one proc. The
client's CPU comes from ``time.process_time()``, the proc's from ``/proc/PID/stat`` (Linux).
When the CPU per call is close to the wall time, the hops of a call run one after another and
cost CPU (thread and process wake-ups), not idle waiting: docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import time

from tetrarch import Actor, endpoint, this_host


class Noop(Actor):
    @endpoint
    def noop(self) -> None:
        return None

    @endpoint
    def pid(self) -> int:
        return os.getpid()


def _proc_cpu(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--pipelined", type=int, default=20000)
    args = parser.parse_args()
    procs = this_host().spawn_procs(per_host={"procs": 1})
    try:
        actor = procs.spawn("noop", Noop)
        pid = actor.pid.call_one().get()
        noop = actor.noop
        for _ in range(300):
            noop.call_one().get()
        lat = []
        cpu, their, wall = time.process_time(), _proc_cpu(pid), time.perf_counter()
        for _ in range(args.calls):
            t = time.perf_counter()
            noop.call_one().get()
            lat.append(time.perf_counter() - t)
        n = args.calls
        wall, cpu, their = time.perf_counter() - wall, time.process_time() - cpu, _proc_cpu(pid) - their
        lat.sort()
        print(f"sequential: p50 {lat[n // 2] * 1e6:.0f} us, wall {wall / n * 1e6:.0f} us/call, "
              f"CPU per call: client {cpu / n * 1e6:.0f} us, proc {their / n * 1e6:.0f} us")
        n = args.pipelined
        cpu, their, wall = time.process_time(), _proc_cpu(pid), time.perf_counter()
        for f in [noop.call_one() for _ in range(n)]:
            f.get()
        wall, cpu, their = time.perf_counter() - wall, time.process_time() - cpu, _proc_cpu(pid) - their
        print(f"pipelined:  {n / wall:.0f} calls/s, CPU per call: client {cpu / n * 1e6:.0f} us, "
              f"proc {their / n * 1e6:.0f} us")
    finally:
        procs.stop().get(timeout=30)


if __name__ == "__main__":
    main()
