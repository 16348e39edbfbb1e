"""``job.telemetry`` and ``telemetry()``: SQL over the hosts' telemetry stores, from the mesh layer."""

from __future__ import annotations

from collections.abc import Callable

from ..process._root import get_root
from ..services._telemetry import Telemetry, TelemetryHandle
from ._shutdown import _live_host_meshes

__all__ = ["job_telemetry", "telemetry"]


def _local() -> TelemetryHandle | None:
    return get_root().telemetry


def job_telemetry(agents: Callable[[], list[str]]) -> Telemetry:
    """The telemetry of the host agents ``agents()`` gives, and of this process's own store."""
    return Telemetry(lambda: get_root().router, agents, _local)


def _every_agent() -> list[str]:
    root = get_root()
    if root.role == "proc":
        return [root.host_agent_address] if root.host_agent_address else []
    return [h.address for mesh in list(_live_host_meshes) for h in (mesh._hosts or [])]


def telemetry() -> Telemetry:
    """SQL over the telemetry of every host this process started (in a proc: its own host).

    ``telemetry().query("SELECT ...")`` returns a ``pyarrow.Table``; see :class:`Telemetry`.
    """
    return job_telemetry(_every_agent)
