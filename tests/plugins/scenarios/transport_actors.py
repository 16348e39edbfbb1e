"""Actors for the third-party plugin scenarios: they report what the proc they run in uses."""

from __future__ import annotations

import os
import threading

from tetrarch import Actor, endpoint
from tetrarch._runtime.process._root import get_root


class Where(Actor):
    @endpoint
    def transport(self) -> dict[str, object]:
        """This proc's transport, its listening address and the transport threads running in it."""
        root = get_root()
        return {
            "transport": root.transport_name,
            "address": root.router.address,
            "threads": sorted({t.name.split(" ")[0] for t in threading.enumerate() if t.name.startswith("threaded-")}),
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "agent": int(os.environ.get("TETRARCH_HOST_AGENT_PID") or os.getppid()),
        }

    @endpoint
    def echo(self, value: object) -> object:
        return value
