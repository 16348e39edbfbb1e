"""Actors the benchmarks call (a module of their own, so procs import it by name)."""

from __future__ import annotations

from typing import Any

from tetrarch import Actor, endpoint


class Noop(Actor):
    @endpoint
    def noop(self) -> None:
        return None


class Sink(Actor):
    @endpoint
    def nbytes(self, data: Any) -> int:
        return memoryview(data).nbytes
