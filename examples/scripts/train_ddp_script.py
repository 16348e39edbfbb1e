"""An unmodified torchrun-style script: it knows only env:// and torch.distributed.

    torchrun --nproc-per-node 4 examples/scripts/train_ddp_script.py --steps 5   # with torchrun
    python examples/spmd_script.py                                              # on a tetrarch mesh
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()

backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % max(torch.cuda.device_count(), 1)) \
    if backend == "nccl" else torch.device("cpu")

torch.manual_seed(0)
model = DDP(nn.Linear(4, 1).to(device))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
for step in range(args.steps):
    x = torch.randn(8, 4, generator=g).to(device)
    y = x.sum(dim=1, keepdim=True)
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if rank == 0:
        print(f"step {step}: loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
if rank == 0:
    print(f"trained on {world} ranks with {backend}", flush=True)
