"""Run an unmodified torchrun-style script on a mesh of 4 procs: with ``SPMDActor.main``, then served.

Every proc gets torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``, ...) from its mesh coordinates; rank 0's actor keeps the rendezvous store open
on a port the OS picked, so no free port is probed and rebound. Each rank's output reaches this
terminal prefixed with its rank.

The second half does the same from a torchrun command line: ``tetrarch.job.spmd.serve`` reserves
the procs once (a detached job server owns them) and ``run_spmd()`` reruns the script on them, as
often as you like, from this process or, with ``job_load(state_path)``, from any later one.

    python examples/spmd_script.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tetrarch import this_host
from tetrarch.job.spmd import serve
from tetrarch.spmd import SPMDActor

SCRIPT = Path(__file__).resolve().parent / "scripts" / "train_ddp_script.py"


def with_spmd_actor() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    try:
        am = procs.spawn("spmd", SPMDActor)
        addr, port = am.slice(gpus=0).get_host_port.call_one(None).get()
        for _ in range(2):  # a second run on the same procs gets a fresh store
            am.main.call(addr, port, [str(SCRIPT), "--steps", "5"]).get()
    finally:
        procs.stop().get()
    print("spmd_script: 4 ranks ran train_ddp_script.py twice through SPMDActor.main")


def served() -> None:
    with tempfile.TemporaryDirectory() as tmp:  # the default state file is ./.tetrarch/spmd_job.json
        command = ["torchrun", "--nproc-per-node=4", "--standalone", str(SCRIPT), "--steps", "5"]
        with serve(command, state_path=os.path.join(tmp, "job.json")) as job:  # leaving the block kills it
            job.run_spmd()
            job.run_spmd()  # the same procs: no proc start, no torch import
    print("spmd_script: 4 ranks ran train_ddp_script.py twice through serve().run_spmd()")


if __name__ == "__main__":
    with_spmd_actor()
    served()
