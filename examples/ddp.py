"""DistributedDataParallel on 4 procs, set up the Monarch way (``setup_torch_elastic_env``).

Each proc trains the same tiny linear model on its quarter of every global batch; DDP
averages the gradients, so the weights end exactly where one process training on the whole
batch ends. The client prints rank 0's loss going down and checks that equality.
Runs on CPU (gloo); with a GPU per proc it uses nccl.

    python examples/ddp.py

A Monarch program ports by changing its imports (``monarch.actor`` -> ``tetrarch``,
``monarch.spmd`` -> ``tetrarch.spmd``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from tetrarch import Actor, current_rank, endpoint, this_host
from tetrarch.spmd import pick_backend, setup_torch_elastic_env

WORLD_SIZE, STEPS, BATCH, FEATURES, LR = 4, 8, 16, 8, 0.1


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    """``STEPS`` global batches of ``BATCH`` samples, the same in every process."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(STEPS, BATCH, FEATURES, generator=g)
    y = x @ torch.linspace(-1.0, 1.0, FEATURES).unsqueeze(1) + 0.5
    return x, y


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(FEATURES, 1)


def train(model: nn.Module, xs: torch.Tensor, ys: torch.Tensor) -> list[float]:
    """Plain SGD on the batches ``xs``/``ys``; the loss of each step."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for x, y in zip(xs, ys, strict=True):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class DDPTrainer(Actor):
    def __init__(self) -> None:
        self.rank = current_rank().rank

    @endpoint
    def train(self) -> tuple[list[float], dict[str, torch.Tensor]]:
        backend = pick_backend()  # nccl when this proc sees a GPU, else gloo
        dist.init_process_group(backend)  # env://: the variables setup_torch_elastic_env set
        device = torch.device("cuda") if backend == "nccl" else torch.device("cpu")
        world, rank = dist.get_world_size(), dist.get_rank()
        # Kept on the actor: freeing a DDP model right after its last collective can deadlock
        # in torch 2.x with gloo (docs/spmd.md, "Known torch issue").
        self.model = DDP(make_model().to(device))
        x, y = make_data()
        per = BATCH // world
        shard = slice(rank * per, (rank + 1) * per)
        losses = train(self.model, x[:, shard].to(device), y[:, shard].to(device))
        dist.destroy_process_group()
        return losses, {k: v.detach().cpu() for k, v in self.model.module.state_dict().items()}


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": WORLD_SIZE})
    try:
        setup_torch_elastic_env(procs)
        trainers = procs.spawn("trainers", DDPTrainer)
        results = trainers.train.call().get()
    finally:
        procs.stop().get()
    losses, weights = results.item(gpus=0)
    for step, loss in enumerate(losses):
        print(f"step {step}: rank 0 loss {loss:.4f}")
    reference = make_model()
    train(reference, *make_data())  # one process, the whole global batch
    diff = max((weights[k] - v).abs().max().item() for k, v in reference.state_dict().items())
    same = all(torch.allclose(weights[k], v, atol=1e-6) for k, v in reference.state_dict().items())
    print(f"ddp: {WORLD_SIZE} ranks, rank 0 loss {losses[0]:.4f} -> {losses[-1]:.4f};"
          f" weights equal one-process training: {same} (max difference {diff:.1e})")


if __name__ == "__main__":
    main()
