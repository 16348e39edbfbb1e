"""Actors for the job tests (procs import this module by name; conftest puts this folder on sys.path)."""

from __future__ import annotations

import os

from tetrarch import Actor, endpoint


class Where(Actor):
    """Says which processes it runs in and what its environment holds."""

    @endpoint
    def pids(self) -> tuple[int, int]:
        """(this proc's pid, its parent's: the host agent's)."""
        return os.getpid(), int(os.environ["TETRARCH_HOST_AGENT_PID"])  # its parent may be the zygote

    @endpoint
    def env(self, name: str) -> str | None:
        return os.environ.get(name)
