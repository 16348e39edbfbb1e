"""What an allocator plugin implements: "bring up N host agents".

Core's host agent (``python -m tetrarch._runtime.programs._host_agent``) does everything else:
it connects back to the client, spawns procs on its host and reports their exits. So
an allocator only has to start the command it is given, once per host, and tell the
kernel when one of those processes ends.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..._config import ENV_HOST_INDEX, ENV_SECRET_FILE
from ..._errors import AllocatorError, ArgumentError
from ._secret import write_secret_file
from ._spawn import HOST_AGENT_MODULE, ExitInfo

__all__ = ["HOST_AGENT_MODULE", "AgentCommand", "AllocRequest", "Allocation", "Allocator", "AllocatorError"]


@dataclass(frozen=True, slots=True)
class AgentCommand:
    """How to start one host agent.

    ``secret`` is the allocation's secret. It is kept apart from ``env`` and must reach
    the agent in neither its environment nor its command line (the kernel keeps a
    process's initial environment readable in ``/proc/PID/environ``). Pass it either:

    * as an inherited pipe, for agents started on this machine:
      ``spawn_watched(argv, env_for(index), on_exit, secret=command.secret)``;
    * as a file only the user can read, for agents started elsewhere (e.g. through
      ``srun``): ``env_for(index, secret_file=command.secret_file(directory))``, one
      file per agent, in a directory the agent can read (it deletes the file).

    ``env_for(index)`` sets ``TETRARCH_HOST_INDEX`` to the host's index (0..hosts-1);
    a launcher that provides ``SLURM_PROCID`` instead may use ``env`` as it is.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]
    secret: bytes | None = field(default=None, repr=False)

    def env_for(self, index: int, *, secret_file: str | None = None) -> dict[str, str]:
        """The environment of agent ``index``; with ``secret_file`` (from :meth:`secret_file`) the agent reads it."""
        env = dict(self.env)
        env[ENV_HOST_INDEX.name] = str(index)
        if secret_file is not None:
            env[ENV_SECRET_FILE.name] = secret_file
        return env

    def secret_file(self, directory: str | os.PathLike[str]) -> str:
        """Write the secret to a new file in ``directory`` that only the user can read (mode 0600).

        Returns its path, for :meth:`env_for`'s ``secret_file``. The agent reads it once
        and deletes it, so make one per agent; ``directory`` must be visible to the agent
        (on another node: a shared file system).

        Raises:
            AllocatorError: this command carries no secret, or the file cannot be created.
        """
        if not self.secret:
            raise AllocatorError("this AgentCommand carries no secret to write")
        try:
            return write_secret_file(self.secret, directory)
        except OSError as exc:
            raise AllocatorError(f"cannot create the secret file in {os.fspath(directory)!r}: {exc}") from exc


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

    def client_host(self, options: Mapping[str, object]) -> str | None:
        """The IP the client listens on for a spanning allocation with these options; ``None``: the transport's default.

        Called before :meth:`allocate` when :attr:`spans_hosts` is true (e.g. the
        interface that routes to the cluster's nodes).

        Raises:
            AllocatorError: the options name an address that cannot be used.
        """
        return None

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
