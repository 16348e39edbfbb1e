"""The ``sandbox`` allocator: host agents on this machine, each as if on a host of its own.

What it shows, beside core's ``local`` allocator:

* each agent runs in a scratch folder of its own (its working directory), removed
  once the allocation is stopped;
* the allocation's secret travels the way a launcher for *other* machines must pass
  it (``srun``, ``ssh``: no file descriptor can travel): a 0600 file from
  ``AgentCommand.secret_file(folder)``, named by ``TETRARCH_SECRET_FILE``, which the
  agent reads once and deletes. Never in the environment or on the command line;
* ``spawn_watched`` does the rest: the agent dies with this process, its stderr is
  forwarded and its last lines kept, and ``on_exit`` gets one ``ExitInfo`` when it ends.

Replace ``spawn_watched(argv, env, ..., cwd=folder)`` by your launcher (keeping one
watched process per host, e.g. the ``srun`` step) and this is a multi-host allocator.
"""

from __future__ import annotations

import functools
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tetrarch.plugins import (
    Allocation,
    Allocator,
    AllocatorError,
    AllocRequest,
    ExitInfo,
    WatchedProcess,
    spawn_watched,
)

__all__ = ["SandboxAllocation", "SandboxAllocator"]


class SandboxAllocation(Allocation):
    """The agents of one allocation and the folder that holds their scratch folders."""

    def __init__(self, agents: Sequence[WatchedProcess], root: Path) -> None:
        self.agents = tuple(agents)
        self.root = root
        self._lock = threading.Lock()

    def folder(self, index: int) -> Path:
        """The scratch folder (working directory) of agent ``index``."""
        return self.root / f"host{index}"

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM every agent, SIGKILL those alive ``grace`` seconds later, then remove the folders.

        Returns once every agent ended. Idempotent.
        """
        with self._lock:
            for agent in self.agents:
                agent.signal(signal.SIGTERM)
            deadline = time.monotonic() + max(grace, 0.0)
            for agent in self.agents:
                if agent.wait(max(deadline - time.monotonic(), 0.0)) is None:
                    agent.signal(signal.SIGKILL)
                    agent.wait()
            shutil.rmtree(self.root, ignore_errors=True)


class SandboxAllocator(Allocator):
    """Starts ``request.hosts`` host agents on this machine, each in its own scratch folder."""

    name = "sandbox"
    spans_hosts = False  # the agents are on this machine: the client may listen on loopback

    def _allocate(self, request: AllocRequest, on_exit: Callable[[int, ExitInfo], None]) -> SandboxAllocation:
        """Start the agents (``allocate`` validated ``request.hosts``).

        Raises:
            AllocatorError: the command is empty, a folder or secret file cannot be made,
                or an agent cannot be started; the agents already started are stopped.
        """
        if not request.agent.argv:
            raise AllocatorError("the host agent command is empty")
        root = Path(tempfile.mkdtemp(prefix=f"tetrarch-sandbox-{request.name}-"))
        allocation = SandboxAllocation([], root)
        agents: list[WatchedProcess] = []
        try:
            for index in range(request.hosts):
                folder = allocation.folder(index)
                folder.mkdir(mode=0o700)
                secret_file = request.agent.secret_file(folder) if request.agent.secret else None
                env = request.agent.env_for(index, secret_file=secret_file)
                agents.append(spawn_watched(request.agent.argv, env, functools.partial(on_exit, index),
                                            cwd=str(folder)))
        except (OSError, AllocatorError) as exc:
            SandboxAllocation(agents, root).stop(grace=1.0)
            raise AllocatorError(f"cannot start host agent {len(agents)} of {request.hosts}: {exc}") from exc
        return SandboxAllocation(agents, root)
