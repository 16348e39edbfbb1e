"""A torchrun command line, reserved once and run many times (Monarch's ``monarch.job.spmd``).

::

    from tetrarch.job.spmd import serve, job_load

    job = serve(["torchrun", "--nproc-per-node=4", "--standalone", "train.py", "--lr", "0.1"])
    job.run_spmd()          # the ranks' lines print here, prefixed with their rank
    job.run_spmd()          # again, on the same procs: no torch import, no proc start
    # ... later, in another Python process:
    job = job_load()        # ./.tetrarch/spmd_job.json by default
    job.run_spmd(["train.py", "--lr", "0.2"])
    job.kill()              # procs, host agents and the job server end; the state file goes

``serve`` checks the command here (unsupported torchrun flags are refused by name, the
script must exist) and starts a detached job server that owns the procs; a failed run
raises :class:`SPMDRunError` naming the rank, and the next run works. Importing this module
does not import torch. See docs/spmd.md ("Reserve once, iterate").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {
    "SPMDJob": "tetrarch._spmd._job",
    "SPMDJobError": "tetrarch._spmd._errors",
    "SPMDRunError": "tetrarch._spmd._errors",
    "job_load": "tetrarch._spmd._job",
    "serve": "tetrarch._spmd._job",
}

__all__ = ["SPMDJob", "SPMDJobError", "SPMDRunError", "job_load", "serve"]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)

if TYPE_CHECKING:  # pragma: no cover
    from .._spmd._errors import SPMDJobError, SPMDRunError
    from .._spmd._job import SPMDJob, job_load, serve
