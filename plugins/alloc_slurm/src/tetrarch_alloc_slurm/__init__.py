"""tetrarch allocator whose hosts are the nodes of a Slurm job (backend ``slurm``).

``SlurmJob({"trainers": 2}, partition=...)`` for named host meshes, or
``TETRARCH_ALLOCATOR=slurm`` with ``tetrarch.job.AllocatorJob``. See docs/slurm.md.
"""

from __future__ import annotations

from ._job import SlurmJob
from ._options import SlurmOptions, SlurmPlan

__all__ = ["SlurmJob", "SlurmOptions", "SlurmPlan"]
