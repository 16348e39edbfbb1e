"""``SlurmJob``: named host meshes on the nodes of Slurm jobs (Monarch's ``monarch.job.SlurmJob``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tetrarch.job import AllocatorJob
from tetrarch.plugins.allocator import ENV_CLIENT_ADDR, HOST_AGENT_MODULE, AgentCommand, AllocRequest

from ._options import SlurmOptions, SlurmPlan
from ._slurm import SlurmAllocator

__all__ = ["SlurmJob"]


class SlurmJob(AllocatorJob):
    """Host meshes on Slurm nodes: ``SlurmJob({"trainers": 2}, partition="gpu", time_limit="1:00:00")``.

    Each named mesh is one Slurm job of that many nodes (one host agent per node, started
    by srun); ``state().trainers`` is a ``HostMesh`` with dimension ``hosts``. Inside an
    allocation (``SLURM_JOB_ID`` set: ``salloc``, a batch script) the meshes are steps of
    it instead of new jobs. The keyword arguments are :class:`SlurmOptions`' fields.
    ``kill()`` (or leaving ``with``) cancels the jobs; so does the client's exit or death
    (the agents lose its connection and end, and with them the job).

    Raises:
        ArgumentTypeError, ArgumentError: bad ``meshes`` or options (the message names the option).
    """

    def __init__(self, meshes: Mapping[str, int], *, partition: str | None = None, time_limit: str | None = None,
                 gpus_per_node: int | None = None, cpus_per_task: int | None = None, mem: str | None = None,
                 account: str | None = None, qos: str | None = None, slurm_args: Sequence[str] = (),
                 python_exe: str | None = None, workdir: str | None = None, secret_dir: str | None = None,
                 log_dir: str | None = None, client_host: str | None = None, job_start_timeout: float = 300.0,
                 job_name: str = "tetrarch") -> None:
        given = {"python_exe": python_exe, "workdir": workdir, "secret_dir": secret_dir}
        opts = SlurmOptions(partition=partition, time_limit=time_limit, gpus_per_node=gpus_per_node,
                            cpus_per_task=cpus_per_task, mem=mem, account=account, qos=qos,
                            slurm_args=tuple(slurm_args), log_dir=log_dir, client_host=client_host,
                            job_start_timeout=job_start_timeout, job_name=job_name,
                            **{k: v for k, v in given.items() if v is not None})
        super().__init__(meshes, allocator="slurm", options=vars(opts))
        self.options = opts

    def plan(self) -> dict[str, SlurmPlan]:
        """The sbatch argv, script and srun line of each mesh, without submitting anything.

        The client's address is a placeholder (it is known once the client listens).
        """
        env = {ENV_CLIENT_ADDR.name: "<client address>"}
        command = AgentCommand(("python", "-m", HOST_AGENT_MODULE), env)
        return {name: SlurmAllocator().plan(AllocRequest(hosts, command, name, self._options))
                for name, hosts in self.meshes.items()}

    dry_run = plan

    def __repr__(self) -> str:
        return f"SlurmJob({self.meshes!r})"
