"""Programs for tests/spmd/test_gpu.py (procs import this module)."""

from __future__ import annotations

from typing import Any

#: Models kept past the run: freeing a DDP model right after its last gloo collective can
#: deadlock in torch (docs/spmd.md, "Known torch issue").
_KEPT: list[Any] = []


def make_model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def make_data() -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.randn(5, 32, 8, generator=g), torch.randn(5, 32, 1, generator=g)


def train(model: Any, xs: Any, ys: Any) -> list[float]:
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in zip(xs, ys, strict=True):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    return losses


def ddp_on_picked_backend() -> dict[str, Any]:
    """DDP over the backend ``pick_backend()`` agreed on (cuda tensors with nccl); this rank's shard of the batch."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tetrarch.spmd import pick_backend

    backend = pick_backend()
    dist.init_process_group(backend)
    device = torch.device("cuda") if backend == "nccl" else torch.device("cpu")
    world, rank = dist.get_world_size(), dist.get_rank()
    model = DDP(make_model().to(device))
    xs, ys = make_data()
    per = xs.shape[1] // world
    shard = slice(rank * per, (rank + 1) * per)
    losses = train(model, xs[:, shard].to(device), ys[:, shard].to(device))
    weights = {k: v.detach().cpu() for k, v in model.module.state_dict().items()}
    t = torch.ones(1, device=device) * (rank + 1)
    dist.all_reduce(t)
    _KEPT[:] = [model]
    return {"backend": backend, "losses": losses, "weights": weights, "sum": float(t.item()), "device": str(device)}
