"""Which ``torch.distributed`` backend a rank uses: ``nccl`` when it sees a GPU, else ``gloo``."""

from __future__ import annotations

import os

__all__ = ["pick_backend"]


def pick_backend(requested: str | None = None) -> str:
    """``requested``, checked; or ``"nccl"`` when this proc sees a CUDA GPU, else ``"gloo"``.

    Each proc of a ``gpus`` dimension sees its own GPU (``CUDA_VISIBLE_DEVICES``).

    Raises:
        ImportError: torch is not installed (names ``pip install torch``).
        RuntimeError: ``"nccl"`` requested where no GPU is visible (the message names ``gloo``).
    """
    from ._store import require_torch

    require_torch()
    import torch

    has_gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if requested is None:
        return "nccl" if has_gpu else "gloo"
    if requested == "nccl" and not has_gpu:
        raise RuntimeError("backend 'nccl' needs a CUDA GPU in every proc, and this proc sees none"
                           f" (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r},"
                           f" torch {torch.__version__}); use backend 'gloo' (CPU) or pick_backend() to choose")
    return requested
