"""torchrun-style SPMD programs on a proc mesh (the machinery behind ``tetrarch.spmd``).

``_env``     torchrun's environment variables, derived from a mesh coordinate (pure)
``_store``   the rendezvous TCPStore: bound by its owner on port 0, kept open (no free-port race)
``_target``  what ``SPMDActor.main`` runs (a script, ``-m module``, a callable) and how it ends
``_backend`` nccl or gloo: nccl only when every rank of the run sees a GPU
``_net``     the interface gloo uses across hosts (toward MASTER_ADDR)
``_abort``   a run's failure line: the first failing (or dying) rank is known to every other at once
``_guard``   what a rank does then: abort an NCCL group; stop its process if still blocked
``_actor``   SPMDActor
``_setup``   setup_torch_elastic_env

Behind ``tetrarch.job.spmd`` (a torchrun command line, reserved once, run many times):

``_torchrun``  a torchrun command line parsed and checked (pure; unsupported flags refused by name)
``_reserve``   procs and their ranks kept between runs; a run's outcome; killing what a failure left running
``_proc_side``  what a reserved rank runs besides ``main``: output marks, ``--no-python`` executables
``_control``   the job server's wire: length-prefixed JSON frames on a Unix socket, token first
``_relay``     the server's stdout/stderr: the ranks' lines to the caller of the run in progress
``_server``    the detached job server (``python -m tetrarch._spmd._server``)
``_launch``    starting the server and waiting until its ranks are up
``_job``       serve, SPMDJob, job_load (the client side)
``_errors``    SPMDJobError, SPMDRunError
``_cli_run``   ``tetrarch run``
"""

from __future__ import annotations

__all__: list[str] = []
