"""Scenario: SQL over the telemetry of a SlurmJob of 2 nodes (the cluster in SLURM_CONF).

Metrics are on (TETRARCH_METRICS=1; the OTLP exporter points at a closed loopback port): each
proc's metric points go to its host agent's store. The client asks ``job.telemetry`` for the
points' hosts until both nodes' rows are in, and times the queries.
Prints JSON lines starting with ``{``.
"""

from __future__ import annotations

import json
import socket
import sys
import time

from tetrarch import Actor, configure, endpoint
from tetrarch_alloc_slurm import SlurmJob


class Named(Actor):
    @endpoint
    def name(self) -> str:
        return socket.gethostname()


def main() -> int:
    configure(transport="tcp")
    job = SlurmJob({"workers": 2}, time_limit="5", job_start_timeout=60, job_name="tetrarch-telemetry")
    procs = job.state().workers.spawn_procs(per_host={"procs": 1})
    actors = procs.spawn("named", Named)
    names = sorted(v for _p, v in actors.name.call().get(timeout=60).items())
    sql = ("SELECT host, count(DISTINCT pid) AS n FROM metric_points "
           "WHERE name = 'tetrarch.actor.calls' AND attributes LIKE '%named%' GROUP BY host")
    deadline, latencies = time.monotonic() + 60, []
    while True:
        t0 = time.perf_counter()
        rows = job.telemetry.query(sql).to_pylist()
        latencies.append(time.perf_counter() - t0)
        if len(rows) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # procs export every 200 ms and hand rows over within a second: poll
    t0 = time.perf_counter()
    events = job.telemetry.query("SELECT DISTINCT event FROM events ORDER BY 1").to_pylist()
    warm = time.perf_counter() - t0
    print(json.dumps({"names": names, "rows": sorted(rows, key=lambda r: r["host"]), "first_s": latencies[0],
                      "warm_s": warm, "events": [e["event"] for e in events]}), flush=True)
    procs.stop().get(timeout=60)
    job.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
