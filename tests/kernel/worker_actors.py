"""Actors for the worker tests (procs import this module by name; tests/kernel is on their sys.path)."""

from __future__ import annotations

import os

from tetrarch import Actor, endpoint


class Peer(Actor):
    """Says where it runs, and asks another actor the same (a reference passed as an argument)."""

    @endpoint
    def whoami(self) -> tuple[int, int]:
        """(this proc's pid, its parent's: its host agent's or worker's)."""
        return os.getpid(), int(os.environ["TETRARCH_HOST_AGENT_PID"])  # its parent may be the zygote

    @endpoint
    def ask(self, other: Peer) -> tuple[int, int]:
        """``other.whoami()``, called from this actor's proc."""
        return other.whoami.call_one().get()
