"""A flood of spans into small telemetry stores (TETRARCH_TELEMETRY_ROWS, _DISK_MB set small by the
test): two procs publish argv[1] spans each, as fast as they can, in argv[2] rounds (``600s``:
rounds for that many seconds, the soak); after each round the host agent's folder and resident
memory are measured. Prints JSON lines starting with ``{``."""

import json
import os
import sys
import threading
import time

import psutil

from tetrarch import Actor, endpoint, this_host
from tetrarch._telemetry import SpanRecord, publish_span
from tetrarch.job import telemetry


class Flooder(Actor):
    @endpoint
    def flood(self, n: int, round_: int) -> int:
        tid, pid = threading.get_native_id(), os.getpid()
        attrs = {"mesh": "flood", "endpoint": "flood", "rank": round_, "pad": "x" * 200}
        for i in range(n):
            now = time.time_ns()
            publish_span(SpanRecord(i + 1, i + 1, 0, "handle", now, now + 1, pid, tid, attrs))
        return n


def folder_bytes(path: str) -> int:
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except FileNotFoundError:  # rotated away between the listing and the look: no longer held
                pass
    return total


def main() -> None:
    n, until = int(sys.argv[1]), sys.argv[2]
    end = time.monotonic() + float(until[:-1]) if until.endswith("s") else None
    rounds = int(until) if end is None else 1 << 30
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("flood", Flooder)
    mesh.initialized.get(timeout=60)
    (agent,) = [p for p in psutil.Process().children() if "host-agent" in " ".join(p.cmdline())]
    base = os.environ["TETRARCH_TELEMETRY_DIR"]
    print(json.dumps({"round": -1, "agent_rss": agent.memory_info().rss}), flush=True)
    for r in range(rounds):
        if end is not None and time.monotonic() > end:
            break
        mesh.flood.call(n, r).get(timeout=120)
        deadline = time.monotonic() + 60
        while True:  # until this round's rows reach the store (each proc flushes within a second)
            got = telemetry().query(f"SELECT count(*) AS n, count(*) FILTER (rank = {r}) AS now FROM spans")
            row = got.to_pylist()[0]
            if row["now"] > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        rows = row["n"]
        agents = [os.path.join(d, x) for d, dirs, _ in os.walk(base) for x in dirs if "-agent-" in x]
        print(json.dumps({"round": r, "rows": rows, "disk": sum(map(folder_bytes, agents)),
                          "agent_rss": agent.memory_info().rss}), flush=True)
    procs.stop().get(timeout=60)


if __name__ == "__main__":
    main()
