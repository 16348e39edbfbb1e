"""A torchrun-style script: env:// rendezvous, all_reduce, write the result to ``argv[1]/<argv[2]>-<rank>.json``."""

import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
with open(os.path.join(sys.argv[1], f"{sys.argv[2]}-{dist.get_rank()}.json"), "w") as f:
    json.dump({"argv": sys.argv, "sum": t.item(), "world": dist.get_world_size(), "name": __name__}, f)
dist.destroy_process_group()
