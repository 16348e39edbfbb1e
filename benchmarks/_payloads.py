"""Payload helpers shared by bench_payload.py and the suite (``python -m benchmarks``).

Nothing here imports tetrarch: the suite's raw baselines and the peer frameworks' adapters
(in another virtual environment) use it too. numpy is imported where used; torch only
for a torch payload.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

MIB = 1 << 20


def best_s(run: Callable[[], Any], runs: int, calls: int) -> float:
    """Best over ``runs`` runs of the mean seconds per ``run()`` across ``calls`` calls."""
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        for _ in range(calls):
            run()
        best = min(best, (time.perf_counter() - t) / calls)
    return best


def memcpy_s(n: int, repeat: int) -> float:
    """Best seconds of a warm copy of ``n`` bytes between two touched buffers."""
    import numpy as np

    src, dst = np.ones(n, dtype=np.uint8), np.zeros(n, dtype=np.uint8)
    np.copyto(dst, src)
    return best_s(lambda: np.copyto(dst, src), max(repeat, 3 if n >= 256 * MIB else 10), 1)


def make_payload(kind: str, n: int) -> Any:
    """``n`` bytes of float32 ones as a numpy array (``kind="numpy"``) or a CPU torch tensor."""
    if kind == "numpy":
        import numpy as np

        return np.ones(n // 4, dtype=np.float32)
    import torch

    return torch.ones(n // 4, dtype=torch.float32)


def touch(data: Any) -> int:
    """Read one byte of every 4 KiB page of an array or tensor: what any consumer of it costs at least.

    A receiver that maps memory it never reads would otherwise look infinitely fast; every
    row pays this on the receiving side (argument: the actor; result: the client).
    """
    import numpy as np

    if isinstance(data, np.ndarray):
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    elif hasattr(data, "untyped_storage"):
        import torch

        flat = data.contiguous().view(-1).view(torch.uint8).numpy()
    else:
        return 0
    return int(flat[::4096].sum())
