"""Actors on 2 Slurm nodes x 2 procs: each reports its rank, host name and Slurm node name.

Needs a Slurm cluster: ``SLURM_CONF`` pointing at it, or the local test cluster::

    scripts/local-slurm start --nodes 2 && eval "$(scripts/local-slurm env)"
    python examples/slurm_hello.py            # options: --partition P --python PATH --timing
    scripts/local-slurm stop
"""

from __future__ import annotations

import argparse
import os
import socket
import time

from tetrarch import Actor, configure, current_rank, endpoint
from tetrarch.job import SlurmJob  # the Slurm plugin: pip install "tetrarch[slurm]"


class Hello(Actor):
    @endpoint
    def where(self) -> dict[str, object]:
        return {"rank": dict(current_rank()), "hostname": socket.gethostname(),
                "node": os.environ.get("SLURMD_NODENAME", "?"), "pid": os.getpid()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partition", default=None)
    parser.add_argument("--python", default=None, help="the Python on the nodes (default: this one)")
    parser.add_argument("--timing", action="store_true", help="print the seconds from state() to every answer")
    args = parser.parse_args()
    configure(transport=os.environ.get("TETRARCH_TRANSPORT") or "tcp")  # ipc cannot span hosts
    with SlurmJob({"workers": 2}, partition=args.partition, python_exe=args.python, time_limit="10",
                  job_start_timeout=60) as job:
        start = time.perf_counter()
        hosts = job.state().workers
        procs = hosts.spawn_procs(per_host={"procs": 2})
        answers = procs.spawn("hello", Hello).where.call().get()
        elapsed = time.perf_counter() - start
        for point, value in answers.items():
            print(point, value)
        if args.timing:
            print(f"state() -> 4 actors answering: {elapsed:.3f} s")
        procs.stop().get()


if __name__ == "__main__":
    main()
