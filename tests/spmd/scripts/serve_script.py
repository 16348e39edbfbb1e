"""A torchrun-style script for the served-job tests: ``serve_script.py MODE TAG [RANK [STATUS]]``.

Every rank joins the group, sums the ranks with all_reduce and prints ``TAG rank R of W sum S pid P``.
Then, by MODE: ``ok`` ends; ``raise`` makes RANK raise ``ValueError``; ``exit`` makes RANK call
``sys.exit(STATUS)``; ``block`` makes RANK raise while the others wait forever outside any collective
(so only killing their procs ends them).
"""

import os
import sys
import threading

import torch
import torch.distributed as dist

mode, tag = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank)])
dist.all_reduce(t)
print(f"{tag} rank {rank} of {world} sum {t.item():g} pid {os.getpid()}", flush=True)
if mode != "ok":
    target = int(sys.argv[3])
    dist.destroy_process_group()
    if rank == target and mode == "exit":
        sys.exit(int(sys.argv[4]))
    if rank == target:
        raise ValueError(f"{tag}: rank {rank} fails on purpose")
    if mode == "block":
        threading.Event().wait()
