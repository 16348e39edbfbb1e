"""Waiting for an idle machine before a benchmark repeat (CPU-busy samples from ``/proc/stat``)."""

from __future__ import annotations

import os
import time
from typing import Any

#: The machine counts as idle when at most this fraction of its CPU time was busy over a sample.
IDLE_BUSY = 0.2
SAMPLE_S = 1.0


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def busy_fraction(seconds: float = SAMPLE_S) -> float:
    """The fraction of all CPUs' time that was busy over the next ``seconds`` (loadavg-based off Linux)."""
    try:
        b0, t0 = _cpu_times()
        time.sleep(seconds)
        b1, t1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return min(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    return (b1 - b0) / max(1, t1 - t0)


def wait_idle(cap_s: float) -> dict[str, Any]:
    """Sample until the machine is idle (:data:`IDLE_BUSY`) or ``cap_s`` seconds have passed.

    Returns what happened (``waited_s``, ``busy``: the last sample, ``idle``, ``said``: a line
    for the log). ``cap_s`` 0 does not sample at all.
    """
    if cap_s <= 0:
        return {"waited_s": 0.0, "busy": None, "idle": None, "said": "no idle wait"}
    start = time.monotonic()
    while True:
        busy = busy_fraction()
        waited = time.monotonic() - start
        if busy <= IDLE_BUSY:
            said = f"idle (CPU {busy:.0%} busy)" + (f" after waiting {waited:.0f} s" if waited > 2 * SAMPLE_S else "")
            return {"waited_s": waited, "busy": busy, "idle": True, "said": said}
        if waited >= cap_s:
            return {"waited_s": waited, "busy": busy, "idle": False,
                    "said": f"still busy (CPU {busy:.0%}) after waiting {waited:.0f} s: figures are noisy"}
