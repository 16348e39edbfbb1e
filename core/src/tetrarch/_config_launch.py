"""The ``TETRARCH_*`` variables the kernel sets for the processes it starts: no settings.

They are declared here, beside the settings of :mod:`tetrarch._config` (which re-exports
them), so that every ``TETRARCH_*`` name is declared in one of the two and documented in
``docs/configuration.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ._errors import ConfigError

__all__ = [
    "ENV_ALLOC_ID", "ENV_ALLOC_TRANSPORT", "ENV_AT_DEFAULT", "ENV_CLIENT_ADDR", "ENV_HOST_AGENT_ADDR",
    "ENV_HOST_AGENT_PID", "ENV_HOST_INDEX", "ENV_LAUNCHER_PID", "ENV_OWNER_ADDR", "ENV_PROC_COORDS", "ENV_PROC_ID",
    "ENV_PROC_MESH", "ENV_RANK_DIM", "ENV_RELAYED",
    "ENV_SECRET_FD", "ENV_SECRET_FILE", "ENV_SIZE_DIM", "ENV_SPANS_HOSTS", "ENV_SPMD_BACKEND", "ENV_SYS_PATH",
    "LAUNCH_VARS", "LaunchVar",
]


@dataclass(frozen=True, slots=True)
class LaunchVar:
    """A variable the kernel sets for a process it starts; internal, not a user setting.

    ``name`` is the variable; a ``<DIM>`` in it stands for a mesh dimension's label
    (see :meth:`for_dim`).
    """

    name: str
    doc: str

    def for_dim(self, label: str) -> str:
        """The variable for the mesh dimension ``label``: ``TETRARCH_RANK_<DIM>`` -> ``TETRARCH_RANK_GPUS``.

        Raises:
            ValueError: this variable has no ``<DIM>``.
        """
        if "<DIM>" not in self.name:
            raise ConfigError(f"{self.name} is not per dimension")
        return self.name.replace("<DIM>", label.upper())


ENV_SECRET_FD = LaunchVar(
    "TETRARCH_SECRET_FD", "number of an inherited pipe holding the allocation's secret, which authenticates every "
    "connection (local launches); the host agent or proc reads it once at start and closes it. The secret itself "
    "is never in any process's environment or command line",
)
ENV_LAUNCHER_PID = LaunchVar(
    "TETRARCH_LAUNCHER_PID", "pid of the process that started a host agent or a fresh-interpreter proc (local "
    "launches): the program first asks the kernel to kill it when its launcher's spawning thread ends, and exits at "
    "once if the launcher is already gone. Set instead of running that step between fork and exec, which would need "
    "a full fork of the launcher (a client with torch loaded: about 14 ms a start)",
)
ENV_SECRET_FILE = LaunchVar(
    "TETRARCH_SECRET_FILE", "path of a file only the user can read (0600) holding the allocation's secret, for "
    "launchers that start host agents on other machines (no pipe can travel there); read once at start, then "
    "deleted. Used when `TETRARCH_SECRET_FD` is not set",
)
ENV_CLIENT_ADDR = LaunchVar("TETRARCH_CLIENT_ADDR", "address of the client a host agent connects back to")
ENV_ALLOC_ID = LaunchVar("TETRARCH_ALLOC_ID", "identity of the allocation a host agent belongs to")
ENV_HOST_INDEX = LaunchVar(
    "TETRARCH_HOST_INDEX", "a host agent's index in its allocation, 0..hosts-1 (else `SLURM_PROCID`, else 0)"
)
ENV_OWNER_ADDR = LaunchVar("TETRARCH_OWNER_ADDR", "address of a proc's owner, which it reports ready to and pings")
ENV_PROC_ID = LaunchVar("TETRARCH_PROC_ID", "a proc's identity, e.g. `procs-1a2b[3]`")
ENV_HOST_AGENT_ADDR = LaunchVar("TETRARCH_HOST_AGENT_ADDR", "address of the host agent that started a proc")
ENV_RELAYED = LaunchVar(
    "TETRARCH_RELAYED", "`1` for the procs of a spawn with at least `relay_min` procs on their host, whose mesh calls "
    "come through their host agent: each connects to the agent as soon as it is ready, so the first relayed call does "
    "not wait for the agent to dial them all"
)
ENV_HOST_AGENT_PID = LaunchVar(
    "TETRARCH_HOST_AGENT_PID",
    "pid of the host agent that started a proc (its parent is the host's zygote when procs start as forks)",
)
ENV_SYS_PATH = LaunchVar(
    "TETRARCH_SYS_PATH", "the spawning client's `sys.path`; a proc appends the existing entries it lacks"
)
ENV_PROC_MESH = LaunchVar("TETRARCH_PROC_MESH", "name of the proc mesh a proc belongs to")
ENV_RANK_DIM = LaunchVar(
    "TETRARCH_RANK_<DIM>", "a proc's coordinate along the mesh dimension `<DIM>` (its label upper-cased)"
)
ENV_SIZE_DIM = LaunchVar("TETRARCH_SIZE_<DIM>", "the size of the mesh dimension `<DIM>`")
ENV_PROC_COORDS = LaunchVar(
    "TETRARCH_PROC_COORDS", "a proc's coordinates in its mesh, `hosts=0 gpus=1`: with its mesh name, the prefix of "
    "its output lines and its process title"
)
ENV_ALLOC_TRANSPORT = LaunchVar(
    "TETRARCH_ALLOC_TRANSPORT", "the transport backend of the allocation (the one its client uses): a host agent or "
    "proc listens and dials with exactly this one, whatever `TETRARCH_TRANSPORT` says where it runs, and exits with "
    "an error naming it (and the `pip install` that provides it) when it cannot load it"
)
ENV_SPANS_HOSTS = LaunchVar(
    "TETRARCH_SPANS_HOSTS", "`1` for the host agents and procs of an allocation that spans hosts: they listen on a "
    "routable address instead of loopback"
)
ENV_AT_DEFAULT = LaunchVar(
    "TETRARCH_AT_DEFAULT", "the propagating settings' variables (space-separated) a client has at their defaults "
    "when it spawns procs: the host agent drops them from the environment it gives them, so a value it started "
    "with (inside a `configured` block) does not leak into procs spawned later"
)

ENV_SPMD_BACKEND = LaunchVar(
    "TETRARCH_SPMD_BACKEND",
    "the torch.distributed backend the ranks of an SPMD run agreed on (`nccl` or `gloo`), set by "
    "`SPMDActor.main`/`setup_torch_elastic_env`; `tetrarch.spmd.pick_backend()` follows it")

#: Every launch variable by name, in documentation order.
LAUNCH_VARS: Mapping[str, LaunchVar] = MappingProxyType({
    v.name: v
    for v in (
        ENV_SECRET_FD, ENV_SECRET_FILE, ENV_LAUNCHER_PID, ENV_CLIENT_ADDR, ENV_ALLOC_ID, ENV_HOST_INDEX,
        ENV_OWNER_ADDR, ENV_PROC_ID,
        ENV_HOST_AGENT_ADDR, ENV_RELAYED, ENV_HOST_AGENT_PID, ENV_SYS_PATH, ENV_PROC_MESH, ENV_RANK_DIM, ENV_SIZE_DIM,
        ENV_PROC_COORDS,
        ENV_SPANS_HOSTS, ENV_ALLOC_TRANSPORT, ENV_AT_DEFAULT, ENV_SPMD_BACKEND,
    )
})
