"""A torchrun-style module run with ``["-m", "spmd_module", OUT_DIR, TAG]``: all_reduce, then write what it saw."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

if __name__ == "__main__":
    out_dir, tag = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    with open(os.path.join(out_dir, f"{tag}-{dist.get_rank()}.json"), "w") as f:
        json.dump({"argv": sys.argv, "sum": t.item(), "world": dist.get_world_size()}, f)
    dist.destroy_process_group()
