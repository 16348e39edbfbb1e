"""What each rank of the two-host DDP scenario runs (procs import this module: it sits beside the scenario).

:func:`train` joins the process group as an unmodified torchrun script would (``env://``), trains
a small model with ``DistributedDataParallel`` on gloo, and reports where it ran and which TCP
sockets its process holds while the group is alive, so the test can tell which addresses the
store and gloo used.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

#: Models of finished runs: freeing a DDP model right after its last collective can deadlock in
#: torch 2.13 with gloo (docs/spmd.md, "Known torch issue"); they go when the proc ends.
_KEEP: list[Any] = []

ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
       "GROUP_WORLD_SIZE", "GLOO_SOCKET_IFNAME")
BATCH = 8


def batches(rank: int, steps: int) -> list[Any]:
    """Rank ``rank``'s ``(x, y)`` batches (a generator seeded with the rank): the client rebuilds them."""
    import torch

    g = torch.Generator().manual_seed(rank)
    out = []
    for _ in range(steps):
        x = torch.randn(BATCH, 4, generator=g)
        out.append((x, x.sum(dim=1, keepdim=True)))
    return out


def model_and_optimizer() -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _ip(text: str) -> str:
    """An IPv4-mapped IPv6 address (``::ffff:10.99.0.1``: an IPv6 socket talking IPv4) as the IPv4 address."""
    import ipaddress

    mapped = getattr(ipaddress.ip_address(text), "ipv4_mapped", None)
    return str(mapped) if mapped else text


def _loopback(ip: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(ip).is_loopback


def _sockets() -> dict[str, list[list[Any]]]:
    import psutil

    listen, established = [], []
    for conn in psutil.Process().net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN:
            listen.append([_ip(conn.laddr.ip), conn.laddr.port])
        elif conn.status == psutil.CONN_ESTABLISHED and conn.raddr:
            established.append([_ip(conn.laddr.ip), conn.laddr.port, _ip(conn.raddr.ip), conn.raddr.port])
    return {"listen": listen, "established": established}


def train(steps: int) -> dict[str, Any]:
    """One rank: DDP on gloo for ``steps`` steps; the trained weights, the all-reduced sum of the ranks, and where."""
    import time

    t0 = time.perf_counter()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    # Before the group opens any socket, this process listens only where tetrarch does: the proc's address.
    own = _sockets()["listen"]
    routable = sorted({ip for ip, _port in own if not _loopback(ip)})
    t1 = time.perf_counter()
    dist.init_process_group("gloo")  # env://, as torchrun's workers do
    t2 = time.perf_counter()
    rank = dist.get_rank()
    model, opt = model_and_optimizer()
    ddp = DDP(model)
    for x, y in batches(rank, steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    sockets = _sockets()  # the group (store client, gloo pairs) is still connected
    _KEEP.append(ddp)
    return {
        "env": {name: os.environ.get(name) for name in ENV},
        "hostname": socket.gethostname(),
        "node": os.environ.get("SLURMD_NODENAME"),
        "proc_ip": routable[0] if len(routable) == 1 else routable,
        "own_ports": sorted({port for _ip, port in own}),
        "python": sys.executable,
        "torch": torch.__version__,
        "weights": [p.detach().flatten().tolist() for p in model.parameters()],
        "sum": total.item(),
        "seconds": {"import": t1 - t0, "init": t2 - t1, "train": time.perf_counter() - t2},
        **sockets,
    }
