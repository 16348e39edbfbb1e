"""Actors of the CUDA payload tests (test_cuda_payloads.py); procs import this file."""

from __future__ import annotations

from typing import Any

from tetrarch import Actor, endpoint


class GpuHolder(Actor):
    """Receives CUDA tensors, writes into them, keeps them, makes them."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    @endpoint
    def views(self) -> tuple[str, str]:
        """``(this proc's gpus view, what its host agent said of its own)`` in their handshake."""
        from tetrarch._runtime.process._root import get_root

        root = get_root()
        root.router.connect(root.host_agent_address)
        conn = root.router._routes[root.host_agent_address]
        return root.router._info.gpus, conn.context.peer.gpus

    @endpoint
    def fill(self, value: Any, start: int, stop: int, fill: float) -> str:
        """Writes ``fill`` into ``value[start:stop]`` and waits for it; returns where ``value`` lives."""
        import torch

        value[start:stop] = fill
        if value.device.type == "cuda":
            torch.cuda.synchronize()
        return value.device.type

    @endpoint
    def receive(self, value: Any) -> tuple[str, float]:
        """``(device type, sum)`` of a received tensor."""
        return value.device.type, float(value.double().sum())

    @endpoint
    def keep(self, value: Any) -> int:
        self.kept.append(value)
        return len(self.kept)

    @endpoint
    def drop(self) -> None:
        self.kept.clear()
        import torch

        torch.cuda.synchronize()

    @endpoint
    def make(self, n: int, fill: float) -> Any:
        """A CUDA tensor of ``n`` float32 that this proc keeps too (to see the caller's writes)."""
        import torch

        t = torch.full((n,), fill, dtype=torch.float32, device="cuda")
        self.kept.append(t)
        return t

    @endpoint
    def kept_sum(self) -> float:
        import torch

        torch.cuda.synchronize()
        return float(self.kept[-1].double().sum())

    @endpoint
    def echo(self, value: Any) -> Any:
        return value

    @endpoint
    def pass_on(self, value: Any, other: Any) -> tuple[str, float]:
        """Sends what it received on to ``other`` (its ``receive``)."""
        return other.receive.call_one(value).get(timeout=60)
