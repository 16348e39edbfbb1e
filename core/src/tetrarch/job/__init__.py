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

Jobs persist: ``job.dump(path)`` / ``job_load(path)``; ``job.state(cached_path=...)`` reuses a
running job across runs where its hosts outlive the client: ``WorkerJob`` over workers that run
``tetrarch.run_worker_loop_forever`` (docs/jobs.md).

``tetrarch.job.spmd`` (a submodule) serves a torchrun command line on procs reserved once
(``serve``, ``job_load``; docs/spmd.md).

``job.telemetry.query("SELECT ...")`` runs SQL over the telemetry of a job's hosts, and
``telemetry().query(...)`` over every host this program started, ``this_host()`` included
(``pip install "tetrarch[sql]"``; docs/telemetry.md).

``SlurmJob`` (as Monarch's ``monarch.job.SlurmJob``) comes from the Slurm plugin
(``pip install "tetrarch[slurm]"``; docs/slurm.md); importing it without the plugin raises
``ImportError`` naming that command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_exports

_EXPORTS = {
    "AllocatorJob": "tetrarch._runtime.meshes._job",
    "BatchJob": "tetrarch._runtime.meshes._job",
    "DEFAULT_JOB_PATH": "tetrarch._runtime.meshes._job",
    "WorkerJob": "tetrarch._runtime.meshes._worker_job",
    "job_load": "tetrarch._runtime.meshes._job",
    "job_loads": "tetrarch._runtime.meshes._job",
    "new_secret_file": "tetrarch._runtime.meshes._worker_auth",
    "JobState": "tetrarch._runtime.meshes._job",
    "JobTrait": "tetrarch._runtime.meshes._job",
    "LocalJob": "tetrarch._runtime.meshes._job",
    "MeshNotFoundError": "tetrarch._errors",
    "ProcessJob": "tetrarch._runtime.meshes._job",
    "Telemetry": "tetrarch._runtime.services._telemetry",
    "TelemetryQueryError": "tetrarch._errors",
    "telemetry": "tetrarch._runtime.meshes._telemetry",
}

__all__ = [
    "DEFAULT_JOB_PATH",
    "AllocatorJob",
    "BatchJob",
    "JobState",
    "JobTrait",
    "LocalJob",
    "MeshNotFoundError",
    "ProcessJob",
    "SlurmJob",
    "Telemetry",
    "TelemetryQueryError",
    "WorkerJob",
    "job_load",
    "job_loads",
    "new_secret_file",
    "telemetry",
]
# (kept literal so linters see the re-exports; tests/test_public_api.py checks it)

#: Names from a plugin distribution: name -> (module, the ``tetrarch[extra]`` that installs it).
_PLUGIN_EXPORTS = {"SlurmJob": ("tetrarch_alloc_slurm", "slurm")}

_core_getattr, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)


def __getattr__(name: str) -> Any:
    """Resolve a lazy export; a plugin's (``SlurmJob``) from its distribution.

    Raises:
        ImportError: the plugin that provides ``name`` is not installed (the message says
            which ``pip install "tetrarch[...]"`` adds it).
        AttributeError: no such name.
    """
    if name not in _PLUGIN_EXPORTS:
        return _core_getattr(name)
    module, extra = _PLUGIN_EXPORTS[name]
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise ImportError(f"tetrarch.job.{name} needs the {extra} plugin ({module}), which is not installed: "
                          f'pip install "tetrarch[{extra}]"', name=module) from exc
    globals()[name] = value
    return value

if TYPE_CHECKING:  # pragma: no cover
    from tetrarch_alloc_slurm import SlurmJob

    from .._errors import MeshNotFoundError, TelemetryQueryError
    from .._runtime.meshes._job import (
        DEFAULT_JOB_PATH,
        AllocatorJob,
        BatchJob,
        JobState,
        JobTrait,
        LocalJob,
        ProcessJob,
        job_load,
        job_loads,
    )
    from .._runtime.meshes._telemetry import telemetry
    from .._runtime.meshes._worker_auth import new_secret_file
    from .._runtime.meshes._worker_job import WorkerJob
    from .._runtime.services._telemetry import Telemetry
