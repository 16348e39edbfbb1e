"""A complete small allocator: host agents as processes on this machine, tagged in their environment.

The agents (and so the procs they start) see ``TEST_ALLOC_BY=tagged``, the request's
name in ``TEST_ALLOC_MESH`` and ``options["tag"]`` in ``TEST_ALLOC_TAG``.
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from tetrarch.plugins import Allocation, Allocator, AllocRequest, ExitInfo, spawn_watched


class TaggedAllocation(Allocation):
    def __init__(self, processes: Sequence[Any]) -> None:
        self._processes = tuple(processes)

    def stop(self, grace: float = 5.0) -> None:
        for proc in self._processes:
            proc.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self._processes:
            if proc.wait(max(deadline - time.monotonic(), 0.0)) is None:
                proc.signal(signal.SIGKILL)
                proc.wait()


class TaggedAllocator(Allocator):
    name = "tagged"

    def _allocate(self, request: AllocRequest, on_exit: Callable[[int, ExitInfo], None]) -> TaggedAllocation:
        started = []
        for index in range(request.hosts):
            env = request.agent.env_for(index)
            env.update(TEST_ALLOC_BY="tagged", TEST_ALLOC_MESH=request.name,
                       TEST_ALLOC_TAG=str(request.options.get("tag", "")))
            started.append(spawn_watched(request.agent.argv, env, functools.partial(on_exit, index),
                                         secret=request.agent.secret))
        return TaggedAllocation(started)
