"""Timing helpers the suite's implementations share (no framework imported here)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    """Seconds of each of ``n`` calls of ``fn``."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def p50(fn: Callable[[], Any], n: int, warmup: int = 0) -> float:
    """Median seconds of ``n`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn, n))


def rate(fn: Callable[[int], Any], n: int) -> float:
    """Items per second of one ``fn(n)`` that handles ``n`` items."""
    t = time.perf_counter()
    fn(n)
    return n / (time.perf_counter() - t)


def per_round(round_trip: Callable[[], Any], p: dict[str, Any]) -> float:
    """Seconds per fan-out round: p50 of ``round_trip()`` (a broadcast and every reply back)."""
    return p50(round_trip, p["rounds"], warmup=max(1, p["warmup"] // 10))


def payload_gbps(send: Callable[[Any], Any], mib: int, p: dict[str, Any]) -> float:
    """GB/s of ``send(data)`` for a touched numpy uint8 array of ``mib`` MiB (median of the calls)."""
    import numpy as np

    data = np.ones(mib << 20, dtype=np.uint8)
    send(data)  # connections, buffers and code paths warm
    return data.nbytes / statistics.median(timed(lambda: send(data), p["payload_calls"])) / 1e9
