"""The actor the allocator kit puts in every proc (:mod:`tetrarch.testing.allocator`).

It lives in tetrarch so that procs on any host import it the way the client does.
"""

from __future__ import annotations

import os
import signal
import socket
import threading

from tetrarch import Actor, current_rank, endpoint

__all__ = ["Probe"]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class Probe(Actor):
    """Says where it runs, and kills its host agent on request."""

    @endpoint
    def whoami(self) -> dict[str, object]:
        """This proc: its rank, pid, parent (its host agent), hostname and environment."""
        return {
            "rank": dict(current_rank()),
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "hostname": socket.gethostname(),
            "env": dict(os.environ),
        }

    @endpoint
    def kill_agent_and_wait(self, seconds: float) -> str:
        """SIGKILL this proc's host agent (its parent), then wait up to ``seconds``: the call stays pending
        while the agent dies (this proc dies with it, by its parent-death signal).

        Raises:
            RuntimeError: the parent is not a tetrarch host agent (a bootstrap command put something between).
        """
        parent = os.getppid()
        title = _cmdline(parent)
        if "host-agent" not in title and "_host_agent" not in title:
            raise RuntimeError(f"this proc's parent (pid {parent}: {title!r}) is not its host agent")
        os.kill(parent, signal.SIGKILL)
        threading.Event().wait(seconds)  # bounded: the proc is expected to die long before
        return "still alive"
