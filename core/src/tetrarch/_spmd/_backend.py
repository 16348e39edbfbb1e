"""Which ``torch.distributed`` backend a rank uses: ``nccl`` when every rank sees a GPU, else ``gloo``.

``pick_backend`` in one proc can only see that proc. A mesh where some procs see a GPU and
some do not (a ``gpus`` dimension larger than the host's GPU count) would then mix ``nccl``
and ``gloo`` ranks, and their ``init_process_group`` never meets. So ``SPMDActor.main`` and
``setup_torch_elastic_env`` agree on one backend for the whole world first (every rank says
whether it sees a GPU) and leave it in :data:`BACKEND_ENV`, which ``pick_backend`` follows.
"""

from __future__ import annotations

import os

from .._config import ENV_SPMD_BACKEND

__all__ = ["BACKEND_ENV", "pick_backend", "sees_gpu"]

#: The backend the ranks of the current run agreed on (set by ``main``/``setup_env``).
BACKEND_ENV = ENV_SPMD_BACKEND.name


def sees_gpu() -> bool:
    """Whether this proc sees a CUDA (or ROCm) GPU through torch."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)


def pick_backend(requested: str | None = None) -> str:
    """``requested``, checked; or the backend every rank of the run can use.

    Without ``requested``: the backend ``SPMDActor.main`` / ``setup_torch_elastic_env``
    agreed on for the whole world (``nccl`` when every rank sees a GPU, else ``gloo``);
    outside them, ``nccl`` when this proc sees a GPU, else ``gloo``. Each proc of a ``gpus``
    dimension sees its own GPU (``CUDA_VISIBLE_DEVICES``).

    Raises:
        ImportError: torch is not installed (names ``pip install torch``).
        RuntimeError: ``"nccl"`` requested where no GPU is visible (the message names ``gloo``).
    """
    from ._store import require_torch

    require_torch()
    import torch

    has_gpu = sees_gpu()
    if requested is None:
        agreed = os.environ.get(BACKEND_ENV)
        if agreed in ("nccl", "gloo") and (agreed == "gloo" or has_gpu):
            return agreed
        return "nccl" if has_gpu else "gloo"
    if requested == "nccl" and not has_gpu:
        raise RuntimeError("backend 'nccl' needs a CUDA GPU in every proc, and this proc sees none"
                           f" (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r},"
                           f" torch {torch.__version__}); use backend 'gloo' (CPU) or pick_backend() to choose")
    return requested
