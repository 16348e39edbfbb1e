"""The actor of benchmarks/bench_cuda_payload.py (procs import it)."""

from __future__ import annotations

from typing import Any

from tetrarch import Actor, endpoint


class CudaBench(Actor):
    def __init__(self) -> None:
        self._payload: Any = None

    @endpoint
    def last(self, value: Any) -> float:
        """Reads the received tensor's last element: the receiver has really opened it."""
        return float(value[-1].item())

    @endpoint
    def prepare(self, n: int) -> None:
        import torch

        self._payload = torch.ones(n, device="cuda") if n else None
        torch.cuda.synchronize()
        if not n:
            torch.cuda.empty_cache()

    @endpoint
    def payload(self) -> Any:
        return self._payload
