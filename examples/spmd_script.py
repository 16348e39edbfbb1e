"""Run an unmodified torchrun-style script on a mesh of 4 procs with ``SPMDActor.main``.

Every proc gets torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``, ...) from its mesh coordinates; rank 0's actor keeps the rendezvous store open
on a port the OS picked, so no free port is probed and rebound. Each rank's output reaches this
terminal prefixed with its rank.

    python examples/spmd_script.py
"""

from __future__ import annotations

from pathlib import Path

from tetrarch import this_host
from tetrarch.spmd import SPMDActor

SCRIPT = Path(__file__).resolve().parent / "scripts" / "train_ddp_script.py"


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    try:
        am = procs.spawn("spmd", SPMDActor)
        addr, port = am.slice(gpus=0).get_host_port.call_one(None).get()
        for _ in range(2):  # a second run on the same procs gets a fresh store
            am.main.call(addr, port, [str(SCRIPT), "--steps", "5"]).get()
    finally:
        procs.stop().get()
    print("spmd_script: 4 ranks ran train_ddp_script.py twice through SPMDActor.main")


if __name__ == "__main__":
    main()
