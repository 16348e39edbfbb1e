"""tetrarch allocator whose hosts are the nodes of a Slurm job (backend ``slurm``).

``SlurmJob({"trainers": 2}, partition=...)`` for named host meshes, or
``TETRARCH_ALLOCATOR=slurm`` with ``tetrarch.job.AllocatorJob``. See docs/slurm.md.

The names load on first use: every tetrarch process imports this package when it loads
the plugin registry (its entry point module lives here), and most never need a job.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["SlurmJob", "SlurmOptions", "SlurmPlan"]

_HOME = {"SlurmJob": "._job", "SlurmOptions": "._options", "SlurmPlan": "._options"}


def __getattr__(name: str) -> Any:
    """Import ``SlurmJob``, ``SlurmOptions`` or ``SlurmPlan`` when first asked for.

    Raises:
        AttributeError: no such name.
    """
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover
    from ._job import SlurmJob
    from ._options import SlurmOptions, SlurmPlan
