"""What an allocator plugin implements: "bring up N host agents".

Core's host agent (``python -m tetrarch._runtime._host_agent``) does everything else:
it connects back to the client, spawns procs on its host and reports their exits. So
an allocator only has to start the command it is given, once per host, and tell the
kernel when one of those processes ends.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .._config import ENV_HOST_INDEX
from .._errors import AllocatorError, ArgumentError
from ._spawn import ExitInfo

__all__ = ["AgentCommand", "AllocRequest", "Allocation", "Allocator", "AllocatorError"]


@dataclass(frozen=True, slots=True)
class AgentCommand:
    """How to start one host agent.

    ``env`` holds the allocation's secret: pass it in the environment, never on the
    command line. Set ``TETRARCH_HOST_INDEX`` to the host's index (0..hosts-1) unless
    the launcher provides ``SLURM_PROCID``, which the agent reads instead.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]

    def env_for(self, index: int) -> dict[str, str]:
        env = dict(self.env)
        env[ENV_HOST_INDEX.name] = str(index)
        return env


@dataclass(frozen=True, slots=True)
class AllocRequest:
    """A request for ``hosts`` host agents."""

    hosts: int
    agent: AgentCommand
    name: str = "hosts"
    options: Mapping[str, object] = field(default_factory=dict)


class Allocation(abc.ABC):
    """Host agent processes an allocator started."""

    @abc.abstractmethod
    def stop(self, grace: float = 5.0) -> None:
        """End every host agent process (SIGTERM, then SIGKILL after ``grace``)."""


class Allocator(abc.ABC):
    """Starts host agents. Subclasses implement :meth:`_allocate`."""

    name: str = ""
    #: True when the agents run on other machines: the client then listens on a
    #: routable address instead of loopback.
    spans_hosts: bool = False

    def allocate(self, request: AllocRequest, on_exit: Callable[[int, ExitInfo], None]) -> Allocation:
        """Start ``request.hosts`` host agents; ``on_exit(index, info)`` reports each end.

        Raises:
            ValueError: ``request.hosts`` is not a positive integer.
            AllocatorError: the agents could not be started.
        """
        if not isinstance(request.hosts, int) or request.hosts < 1:
            raise ArgumentError(f"an allocation needs at least one host, got hosts={request.hosts!r}")
        return self._allocate(request, on_exit)

    @abc.abstractmethod
    def _allocate(self, request: AllocRequest, on_exit: Callable[[int, ExitInfo], None]) -> Allocation:
        """Start the agents (the public :meth:`allocate` validated the request)."""
