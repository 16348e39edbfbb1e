"""Jobs: named host meshes from any allocator, in the shape of Monarch's ``monarch.job``.

``this_host()`` is this machine. For hosts from an allocator (the ``local`` one, Slurm,
or a third-party plugin), declare a job and ask for its state::

    from tetrarch.job import AllocatorJob

    with AllocatorJob({"trainers": 2, "workers": 1}, allocator="local") as job:
        state = job.state()                      # starts the host agents
        procs = state.trainers.spawn_procs(per_host={"gpus": 4})   # extent {hosts: 2, gpus: 4}
        ...
    # leaving the block killed the job: its procs and host agents are gone

Without ``allocator=``, the allocator is chosen as every backend is: the
``TETRARCH_ALLOCATOR`` setting, then ``tetrarch_select_backend`` hooks, then priority
(docs/plugins.md §4). See docs/jobs.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

_EXPORTS = {
    "AllocatorJob": "tetrarch._runtime._job",
    "JobState": "tetrarch._runtime._job",
    "JobTrait": "tetrarch._runtime._job",
    "LocalJob": "tetrarch._runtime._job",
    "MeshNotFoundError": "tetrarch._errors",
    "ProcessJob": "tetrarch._runtime._job",
}

__all__ = [
    "AllocatorJob",
    "JobState",
    "JobTrait",
    "LocalJob",
    "MeshNotFoundError",
    "ProcessJob",
]
# (kept literal so linters see the re-exports; tests/test_public_api.py checks it)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)

if TYPE_CHECKING:  # pragma: no cover
    from ._errors import MeshNotFoundError
    from ._runtime._job import AllocatorJob, JobState, JobTrait, LocalJob, ProcessJob
