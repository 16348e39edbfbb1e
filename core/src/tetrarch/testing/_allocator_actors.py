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


def _host_agent_pid() -> int:
    """The pid of the host agent that started this proc (its parent when procs start as fresh interpreters)."""
    return int(os.environ.get("TETRARCH_HOST_AGENT_PID") or os.getppid())


class Probe(Actor):
    """Says where it runs, and kills its host agent on request."""

    @endpoint
    def whoami(self) -> dict[str, object]:
        """This proc: its rank, pid, parent, host agent, hostname and environment."""
        return {
            "rank": dict(current_rank()),
            "pid": os.getpid(),
            "ppid": os.getppid(),  # the host agent, or the host's zygote when procs start as forks
            "agent": _host_agent_pid(),
            "hostname": socket.gethostname(),
            "env": dict(os.environ),
        }

    @endpoint
    def kill_agent_and_wait(self, seconds: float) -> str:
        """SIGKILL this proc's host agent, then wait up to ``seconds``: the call stays pending while the
        agent dies (this proc dies with it, by its parent-death signal, directly or through the zygote).

        Raises:
            RuntimeError: the process named as its host agent is not one.
        """
        parent = _host_agent_pid()
        title = _cmdline(parent)
        if "host-agent" not in title and "_host_agent" not in title:
            raise RuntimeError(f"this proc's host agent (pid {parent}: {title!r}) is not a tetrarch host agent")
        os.kill(parent, signal.SIGKILL)
        threading.Event().wait(seconds)  # bounded: the proc is expected to die long before
        return "still alive"
