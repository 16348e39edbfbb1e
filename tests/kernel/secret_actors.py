"""An actor that looks for the allocation's secret where user code could (tests/kernel/test_secret.py)."""

from __future__ import annotations

import os

from tetrarch import Actor, endpoint


class EnvironReader(Actor):
    @endpoint
    def initial_environ(self) -> bytes:
        """``/proc/self/environ``: the kernel's copy of this process's initial environment."""
        with open("/proc/self/environ", "rb") as f:
            return f.read()

    @endpoint
    def environ(self) -> dict[str, str]:
        return dict(os.environ)
