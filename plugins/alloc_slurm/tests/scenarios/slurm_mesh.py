"""Scenario: a SlurmJob of 2 nodes x 2 procs against the cluster in SLURM_CONF (fresh interpreter).

argv[1]:

* ``basic``: values, output, a killed host agent, then a normal exit;
* ``hold``: print the job id, then wait on stdin until killed;
* ``cut``: the node of ``hosts=1`` loses its network (``fake-hosts cut``, netns layout) while a
  call is pending there; argv[2], argv[3]: ``host_timeout`` and ``heartbeat_interval``;
* ``node``: the node of ``hosts=1`` dies whole (its slurmd and its step's processes SIGKILLed),
  then its slurmd is started again;
* ``inside``: run by a batch script of 2 nodes: the mesh is a step of that allocation.

Prints JSON lines starting with ``{``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import slurm_nodes

from tetrarch import Actor, ActorMesh, SupervisionError, configure, current_rank, endpoint
from tetrarch.plugins import AgentCommand
from tetrarch_alloc_slurm import SlurmJob

#: The allocation's secrets, as the allocator writes them to its files (the test looks for them elsewhere).
SECRETS: list[bytes] = []
_secret_file = AgentCommand.secret_file


def _recording_secret_file(self: AgentCommand, directory: str | os.PathLike[str]) -> str:
    if self.secret:
        SECRETS.append(self.secret)
    return _secret_file(self, directory)


AgentCommand.secret_file = _recording_secret_file


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


def fail_pending(actors: ActorMesh[Where], kill: Callable[[], None], bound: float) -> None:
    """Start a long call on ``hosts=1``, ``kill()`` that host, report how soon the call failed, then ask ``hosts=0``."""
    pending = actors.slice(hosts=1).wait.call(120.0)
    kill()
    start = time.perf_counter()
    try:
        pending.get(timeout=bound)
        emit(kill="no error")
    except SupervisionError as exc:
        emit(kill="SupervisionError", kill_s=time.perf_counter() - start, why=str(exc)[:400])
    survivors = actors.slice(hosts=0).where.call().get(timeout=20)
    emit(survivors=len(list(survivors.items())))


def main() -> int:
    mode = sys.argv[1]
    configure(transport="tcp")
    if mode == "cut":  # before the job starts: the agents and procs take the settings with them
        configure(host_timeout=float(sys.argv[2]), heartbeat_interval=float(sys.argv[3]))
    job = SlurmJob({"workers": 2}, time_limit="5", job_start_timeout=60, job_name="tetrarch-test")
    t0 = time.perf_counter()
    hosts = job.state().workers
    allocation: Any = hosts._allocation
    agents = hosts._ensure_started()
    emit(jobid=getattr(allocation, "jobid", None), secret=SECRETS[0].hex(), agents=[h.pid for h in agents],
         slurm_job_id=os.environ.get("SLURM_JOB_ID"))
    procs = hosts.spawn_procs(per_host={"procs": 2})
    actors = procs.spawn("where", Where)
    values = actors.where.call().get()
    emit(values=[[dict(p.items()) if hasattr(p, "items") else str(p), v] for p, v in values.items()],
         startup_s=time.perf_counter() - t0)
    victim = next(v["node"] for _p, v in values.items() if v["rank"]["hosts"] == 1)
    if mode == "hold":
        sys.stdin.read()  # the test SIGKILLs us
    elif mode == "basic":  # the host agent of node 2 (one PID namespace here)
        fail_pending(actors, lambda: os.kill(agents[1].pid, signal.SIGKILL), 20)
    elif mode == "cut":
        try:
            fail_pending(actors, lambda: slurm_nodes.cut(victim), float(sys.argv[2]) + 30)
        finally:
            slurm_nodes.heal(victim)  # so that scancel reaches the node's slurmd
    elif mode == "node":
        assert victim != slurm_nodes.batch_host(allocation.jobid), "hosts=1 runs the batch script"
        try:
            fail_pending(actors, lambda: emit(killed=slurm_nodes.kill_node(victim)), 20)
        finally:
            slurm_nodes.restart_node(victim)
    return 0


if __name__ == "__main__":
    sys.exit(main())
