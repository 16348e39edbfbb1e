"""Actor classes for the chaos test (procs import them by module name)."""

from __future__ import annotations

import os
import time

from tetrarch import Actor, endpoint


class ChaosWorker(Actor):
    """Answers ``work`` calls after a short pause, naming the process that served them."""

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def work(self, token: int, delay: float) -> tuple[int, int]:
        time.sleep(delay)  # simulated work, not synchronization
        return token, os.getpid()
