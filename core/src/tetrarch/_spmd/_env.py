"""torchrun's environment variables, derived from a coordinate of a mesh.

Pure functions, except that :func:`torchrun_env` looks up (never sends to) the route to
``MASTER_ADDR`` to pin gloo's interface when the group spans hosts (``_net``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._net import interface_env

__all__ = ["ROLE_NAME", "RankInfo", "torchrun_env"]

#: ``ROLE_NAME`` as torchrun sets it (Monarch's SPMDActor writes ``"rank"``; scripts written for
#: torchrun expect torchrun's value).
ROLE_NAME = "default"


@dataclass(frozen=True, slots=True)
class RankInfo:
    """One rank's place in an SPMD group. The mesh's last dimension is the local one (a host's procs)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @property
    def group_rank(self) -> int:
        return self.rank // self.local_world_size

    @property
    def group_world_size(self) -> int:
        return -(-self.world_size // self.local_world_size)

    @classmethod
    def of(cls, rank: int, labels: Sequence[str], sizes: Sequence[int]) -> RankInfo:
        """The ranks of point ``rank`` (row-major) of the mesh ``labels`` by ``sizes``.

        A mesh without dimensions (one proc, e.g. ``mesh.slice(gpus=0)`` of a 1-D mesh) is a world of one.

        Raises:
            ValueError: the mesh has a dimension of size zero.
        """
        check_sizes(dict(zip(labels, sizes, strict=True)))
        local = sizes[-1] if sizes else 1
        return cls(rank=rank, world_size=math.prod(sizes), local_rank=rank % local, local_world_size=local)


def check_sizes(sizes: Mapping[str, int]) -> None:
    """Raise ``ValueError`` unless ``sizes`` describes at least one rank."""
    empty = sorted(label for label, size in sizes.items() if size < 1)
    if empty:
        raise ValueError(f"the mesh has dimensions of size zero {empty} ({dict(sizes)}): an SPMD group needs"
                         " every dimension at least 1; slice the mesh so each keeps a member")


def torchrun_env(info: RankInfo, master_addr: str, master_port: int, *, agent_store: bool,
                 restart_count: int = 0, run_id: str = "none") -> dict[str, str]:
    """Every variable torchrun gives a worker, for ``info``.

    ``agent_store``: the TCPStore at ``master_addr:master_port`` already runs (started by
    whoever launched the group), so every rank, rank 0 included, connects to it as a client
    (``TORCHELASTIC_USE_AGENT_STORE=True``) instead of rank 0 binding ``MASTER_PORT`` itself.

    When ``master_addr`` is not a loopback address, ``GLOO_SOCKET_IFNAME`` is added too: the
    interface this host reaches ``master_addr`` through (unless the user set the variable), since
    gloo's default may announce 127.0.0.1 or another network's address to ranks on other hosts.
    """
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(int(master_port)),
        "RANK": str(info.rank),
        "WORLD_SIZE": str(info.world_size),
        "LOCAL_RANK": str(info.local_rank),
        "LOCAL_WORLD_SIZE": str(info.local_world_size),
        "GROUP_RANK": str(info.group_rank),
        "GROUP_WORLD_SIZE": str(info.group_world_size),
        "ROLE_RANK": str(info.rank),
        "ROLE_WORLD_SIZE": str(info.world_size),
        "ROLE_NAME": ROLE_NAME,
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
        "TORCHELASTIC_USE_AGENT_STORE": str(agent_store),
    }
    env.update(interface_env(master_addr))
    return env
