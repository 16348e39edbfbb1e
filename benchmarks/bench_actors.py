"""Actors the benchmarks call (a module of their own, so procs import it by name).

The same classes serve tetrarch and Monarch (whose ``monarch.actor`` API is tetrarch's):
``TETRARCH_BENCH_FRAMEWORK=monarch`` in the environment (which procs inherit) builds them
on ``monarch.actor`` instead of ``tetrarch``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from _payloads import touch

if os.environ.get("TETRARCH_BENCH_FRAMEWORK") == "monarch":
    from monarch.actor import Actor, endpoint  # type: ignore[import-not-found]
else:
    from tetrarch import Actor, endpoint


class Noop(Actor):
    @endpoint
    def noop(self) -> None:
        return None

    @endpoint
    def cpu_seconds(self) -> float:
        """This process's CPU time so far, all its threads (a benchmark's per-call cost on the actor's side)."""
        return time.process_time()


class TelemetryNoop(Noop):
    """``Noop`` whose process's telemetry can be switched while it runs (``bench_telemetry.py --paired``)."""

    @endpoint
    def telemetry(self, metrics: bool, sample: float) -> None:
        from _telemetry_toggle import toggle

        from tetrarch._runtime.actors._runner import current_actor

        toggle(metrics, sample, current_actor())


class AsyncNoop(Actor):
    """``Noop`` with an ``async def`` endpoint (a class of its own: Monarch refuses one that mixes both)."""

    @endpoint
    async def noop(self) -> None:
        return None


class Sink(Actor):
    @endpoint
    def nbytes(self, data: Any) -> int:
        return memoryview(data).nbytes

    @endpoint
    def touched(self, data: Any) -> int:
        """Every page of ``data`` read (``_payloads.touch``), then its length."""
        touch(data)
        return int(data.nbytes)
