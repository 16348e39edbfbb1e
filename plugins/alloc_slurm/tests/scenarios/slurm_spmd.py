"""Scenario: DDP with gloo on a SlurmJob of 2 nodes x 2 procs (the cluster in SLURM_CONF; fresh interpreter).

``SPMDActor.get_host_port`` on rank 0 starts the rendezvous store, ``main`` runs
:func:`spmd_train.train` on every rank; the client then trains the same model in one process on
the same global batches. Prints JSON lines starting with ``{``: the job id, the rendezvous
address, the ranks' reports (with their mesh point) and the one-process weights.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from typing import Any

import spmd_train

from tetrarch import configure
from tetrarch.job import SlurmJob
from tetrarch.spmd import SPMDActor
from tetrarch.testing import scaled

STEPS = 3
WORLD = 4


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def one_process_weights() -> list[list[float]]:
    """The same training in one process: each step on the concatenation of the ranks' batches."""
    import torch

    model, opt = spmd_train.model_and_optimizer()
    per_rank = [spmd_train.batches(rank, STEPS) for rank in range(WORLD)]
    for step in range(STEPS):
        x = torch.cat([per_rank[r][step][0] for r in range(WORLD)])
        y = torch.cat([per_rank[r][step][1] for r in range(WORLD)])
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().flatten().tolist() for p in model.parameters()]


def main() -> int:
    configure(transport="tcp")  # ipc cannot span hosts
    with SlurmJob({"workers": 2}, time_limit="5", job_start_timeout=60, job_name="tetrarch-test-spmd") as job:
        t0 = time.perf_counter()
        hosts = job.state().workers
        emit(jobid=getattr(hosts._allocation, "jobid", None), python=sys.executable)
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        am: Any = procs.spawn("spmd", SPMDActor)
        addr, port = am.slice(hosts=0, gpus=0).get_host_port.call_one(None).get(timeout=scaled(60))
        emit(addr=addr, port=int(port), startup_s=time.perf_counter() - t0)
        t1 = time.perf_counter()
        values = am.main.call(addr, port, functools.partial(spmd_train.train, STEPS)).get(timeout=scaled(120))
        emit(ranks=[[dict(point.items()), value] for point, value in values.items()],
             train_s=time.perf_counter() - t1)
        emit(reference=one_process_weights())
        procs.stop().get(timeout=scaled(30))
    return 0


if __name__ == "__main__":
    sys.exit(main())
