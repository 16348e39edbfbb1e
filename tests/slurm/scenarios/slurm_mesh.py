"""Scenario: a SlurmJob of 2 nodes x 2 procs against the cluster in SLURM_CONF (fresh interpreter).

argv[1]: ``basic`` (values, output, a killed host agent, then a normal exit) or ``hold``
(print the job id, then wait on stdin until killed). Prints JSON lines starting with ``{``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from tetrarch import Actor, SupervisionError, configure, current_rank, endpoint
from tetrarch._runtime._root import get_root
from tetrarch_alloc_slurm import SlurmJob


class Where(Actor):
    @endpoint
    def where(self) -> dict[str, object]:
        rank = dict(current_rank())
        print(f"hello from node {os.environ.get('SLURMD_NODENAME')}", flush=True)
        return {"rank": rank, "hostname": socket.gethostname(), "node": os.environ.get("SLURMD_NODENAME")}

    @endpoint
    def wait(self, seconds: float) -> str:
        time.sleep(seconds)  # a long call that stays pending while its host dies
        return "done"


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main() -> int:
    configure(transport="tcp")
    mode = sys.argv[1]
    job = SlurmJob({"workers": 2}, time_limit="5", job_start_timeout=60, job_name="tetrarch-test")
    t0 = time.perf_counter()
    hosts = job.state().workers
    allocation = hosts._allocation
    emit(jobid=getattr(allocation, "jobid", None), secret=get_root().secret.hex(),
         agents=[h.pid for h in hosts._ensure_started()])
    procs = hosts.spawn_procs(per_host={"procs": 2})
    actors = procs.spawn("where", Where)
    values = actors.where.call().get()
    emit(values=[[dict(p.items()) if hasattr(p, "items") else str(p), v] for p, v in values.items()],
         startup_s=time.perf_counter() - t0)
    if mode == "hold":
        sys.stdin.read()  # the test SIGKILLs us
        return 0
    pending = actors.slice(hosts=1).wait.call(30.0)
    os.kill(hosts._ensure_started()[1].pid, signal.SIGKILL)  # the host agent of node 2 (one PID namespace here)
    t_kill = time.perf_counter()
    try:
        pending.get(timeout=20)
        emit(kill="no error")
    except SupervisionError as exc:
        emit(kill="SupervisionError", kill_s=time.perf_counter() - t_kill, why=str(exc)[:300])
    survivors = actors.slice(hosts=0).where.call().get(timeout=20)
    emit(survivors=len(list(survivors.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
