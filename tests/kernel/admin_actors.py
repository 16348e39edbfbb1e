"""Actor classes for the admin API tests (importable by the procs)."""

from __future__ import annotations

import os
import re
import time

from tetrarch import Actor, current_rank, endpoint


class Watched(Actor):
    @endpoint
    def rank(self) -> int:
        return current_rank().rank

    @endpoint
    def block_until(self, path: str, limit_s: float) -> bool:
        """Run until the file ``path`` exists (at most ``limit_s``): the actor is busy meanwhile."""
        end = time.monotonic() + limit_s
        while not os.path.exists(path):
            if time.monotonic() > end:
                return False
            time.sleep(0.005)
        return True

    @endpoint
    def hold_gil(self) -> bool:
        """A C call that never lets go of the GIL for a long while (a regex backtracking: minutes)."""
        return re.match(r"(a+)+$", "a" * 40 + "b") is not None


class Stepper(Actor):
    @endpoint
    def step(self, x: int) -> int:
        y = x * 2
        breakpoint()  # noqa: T100 - the debugger test pauses here
        z = y + 1
        return z
