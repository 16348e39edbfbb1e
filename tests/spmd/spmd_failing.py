"""Programs in which one rank fails, for tests/spmd/test_failures.py (procs import this module)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path


def one_rank_fails(mode: str, bad_rank: int, out: str) -> float:
    """Join a gloo group; rank ``bad_rank`` fails as ``mode`` says while the others wait for it.

    ``raise``/``exit3``/``exit0``/``kill``: after a barrier, the bad rank raises, calls
    ``sys.exit(3)``/``sys.exit(0)`` or is SIGKILLed, and the others enter an all-reduce it
    never joins. ``raise_while_waiting``: the others wait in plain Python (no collective
    notices anything), so only stopping their processes ends the run.
    """
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    Path(out, f"pid-{rank}").write_text(str(os.getpid()))
    dist.init_process_group("gloo")
    dist.barrier()
    if rank == bad_rank:
        if mode in ("raise", "raise_while_waiting"):
            raise ValueError(f"boom on rank {rank}")
        if mode == "exit3":
            sys.exit(3)
        if mode == "exit0":
            sys.exit(0)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    if mode == "raise_while_waiting":
        threading.Event().wait(300)
    t = torch.ones(1)
    dist.all_reduce(t)
    return float(t.item())
