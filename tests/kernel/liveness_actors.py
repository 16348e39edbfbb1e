"""Actors for the liveness tests: stalls a proc can survive (procs import this module by name)."""

from __future__ import annotations

import ctypes
import math
import os
import time

from tetrarch import Actor, endpoint


class Staller(Actor):
    """Answers, or stalls its whole process by holding the GIL in a C call."""

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def ok(self) -> str:
        return "alive"

    @endpoint
    def hold_gil(self, seconds: float) -> float:
        """Sleep in C (libc ``sleep``) *with* the GIL held: no Python thread of this proc runs meanwhile.

        A function called through ``ctypes.PyDLL`` keeps the GIL (``CDLL`` would release it).
        Returns the seconds it took.
        """
        start = time.monotonic()
        ctypes.PyDLL(None).sleep(ctypes.c_uint(math.ceil(seconds)))
        return time.monotonic() - start

    @endpoint
    def shout(self, nbytes: int) -> int:
        """Print ``nbytes`` bytes to stdout in lines of 1 KiB; returns how many were printed."""
        line = "x" * 1023
        for _ in range(nbytes // 1024):
            print(line)
        return nbytes

    @endpoint
    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds
