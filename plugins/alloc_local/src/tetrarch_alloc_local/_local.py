"""The ``local`` allocator: host agents as child processes of this process.

The factory module of the ``local`` backend (``tetrarch_alloc_local._plugin`` declares
it). Written against the public allocator API only (:mod:`tetrarch.plugins.allocator`);
core depends on this distribution, so a plain ``pip install tetrarch`` runs ``this_host()``.
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Callable, Sequence

from tetrarch.plugins.allocator import (
    Allocation,
    Allocator,
    AllocatorError,
    AllocRequest,
    ExitInfo,
    WatchedProcess,
    spawn_watched,
)

__all__ = ["LocalAllocation", "LocalAllocator"]


class LocalAllocation(Allocation):
    """The host agent processes of one local allocation."""

    def __init__(self, processes: Sequence[WatchedProcess]) -> None:
        self._processes = tuple(processes)
        self._stop_lock = threading.Lock()

    @property
    def pids(self) -> tuple[int, ...]:
        """Process ids of the host agents, by host index."""
        return tuple(p.pid for p in self._processes)

    @property
    def processes(self) -> tuple[WatchedProcess, ...]:
        """The watched host agent processes, by host index."""
        return self._processes

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM every agent at once, SIGKILL those still alive ``grace`` seconds later.

        Returns once every agent has ended (about ``grace`` seconds at most, however
        many agents there are). Idempotent.
        """
        with self._stop_lock:
            for proc in self._processes:
                proc.signal(signal.SIGTERM)
            deadline = time.monotonic() + max(grace, 0.0)
            for proc in self._processes:
                proc.wait(max(deadline - time.monotonic(), 0.0))
            late = [p for p in self._processes if p.exit_info is None]
            for proc in late:
                proc.signal(signal.SIGKILL)
            for proc in late:
                proc.wait()


class LocalAllocator(Allocator):
    """Starts ``request.hosts`` host agents as processes on this machine.

    Each agent gets ``request.agent.env_for(index)`` as its whole environment, the
    allocation's secret through an inherited pipe (``spawn_watched(..., secret=...)``),
    and is killed if this process dies.
    """

    name = "local"
    spans_hosts = False

    def _allocate(self, request: AllocRequest, on_exit: Callable[[int, ExitInfo], None]) -> LocalAllocation:
        """Start the agents.

        Raises:
            AllocatorError: the command is empty, or an agent could not be started; the ones already started
                are stopped and their exits are not reported.
        """
        if not request.agent.argv:
            raise AllocatorError("the host agent command is empty")
        reporting = threading.Event()
        reporting.set()

        def report(index: int, info: ExitInfo) -> None:
            if reporting.is_set():
                on_exit(index, info)

        started: list[WatchedProcess] = []
        try:
            for index in range(request.hosts):
                started.append(
                    spawn_watched(
                        request.agent.argv,
                        request.agent.env_for(index),
                        on_exit=functools.partial(report, index),
                        secret=request.agent.secret,
                    )
                )
        except OSError as exc:
            reporting.clear()
            LocalAllocation(started).stop(grace=1.0)
            raise AllocatorError(
                f"cannot start host agent {len(started)} of {request.hosts} ({request.agent.argv[0]!r}): {exc}"
            ) from exc
        return LocalAllocation(started)
