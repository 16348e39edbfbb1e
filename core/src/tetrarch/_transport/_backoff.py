"""Pauses between retries of something that may succeed a moment later, until a deadline.

A Unix-socket dial whose backlog is full, a worker re-binding the address its closing
listener still holds, a client dialling a worker that is still starting: each retries
with pauses that double from ``first`` to ``cap`` and never sleep past the deadline.
"""

from __future__ import annotations

import time

__all__ = ["Backoff"]


class Backoff:
    """Doubling pauses from ``first`` to ``cap`` seconds, for up to ``timeout`` seconds from now."""

    __slots__ = ("deadline", "pause", "cap")

    def __init__(self, timeout: float, first: float = 0.001, cap: float = 0.05) -> None:
        self.deadline = time.monotonic() + timeout
        self.pause = first
        self.cap = cap

    def left(self) -> float:
        """Seconds to the deadline (0 once it passed)."""
        return max(self.deadline - time.monotonic(), 0.0)

    def wait(self) -> bool:
        """Sleep the next pause (cut at the deadline) and return True; False, at once, once the deadline passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(self.pause, left))  # a retry's back-off, not a synchronisation
        self.pause = min(self.pause * 2, self.cap)
        return True
