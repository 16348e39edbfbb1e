"""What an actor has done: calls handled and time in handlers, per endpoint (for the admin API).

Nothing is counted until someone looks: a process counts from the first time the admin API
asks it what runs (:func:`start_counting`), so a program nobody watches pays one ``is None``
test per call. From then on, two clock reads and a few additions per call, on the actor's own
thread; read from the I/O thread without a lock: a reader may see a count one call behind,
never a torn value (each field is one object).
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

__all__ = ["EMPTY", "EndpointStats", "counting", "start_counting"]

_counting = [False]


def counting() -> bool:
    """Whether this process counts its actors' calls (someone looked at it)."""
    return _counting[0]


def start_counting(runners: Any) -> None:
    """Count from now on: each of ``runners`` (``ActorRunner``) gets its counters, and new ones are born counting."""
    _counting[0] = True
    for runner in list(runners):
        if runner.stats is None:
            runner.stats = EndpointStats()


class EndpointStats:
    """One actor's counters: per endpoint ``[calls, seconds in it, longest call]``, and what runs now."""

    __slots__ = ("by_endpoint", "current", "last")

    def __init__(self) -> None:
        self.by_endpoint: dict[str, list[Any]] = {}
        #: ``(endpoint, perf_counter() at its start)`` of the plain handler running now, else None.
        self.current: tuple[str, float] | None = None
        #: The endpoint of the last call that ended ('' before the first).
        self.last = ""

    def start(self, method: str, plain: bool = True) -> float:
        t0 = perf_counter()
        if plain:
            self.current = (method, t0)
        return t0

    def end(self, method: str, t0: float, plain: bool = True) -> None:
        dt = perf_counter() - t0
        row = self.by_endpoint.get(method)
        if row is None:
            self.by_endpoint[method] = [1, dt, dt]
        else:
            row[0] += 1
            row[1] += dt
            if dt > row[2]:
                row[2] = dt
        self.last = method
        if plain:
            self.current = None

    def snapshot(self) -> dict[str, Any]:
        """Totals, what runs now and for how long, and the per-endpoint rows (JSON-able)."""
        rows = {name: {"calls": n, "total_s": total, "max_s": longest, "mean_s": total / n}
                for name, (n, total, longest) in list(self.by_endpoint.items())}
        current = self.current
        return {"handled": sum(r["calls"] for r in rows.values()), "busy_s": sum(r["total_s"] for r in rows.values()),
                "last_endpoint": self.last or None,
                "running_for_s": None if current is None else perf_counter() - current[1],
                "endpoints": rows}


#: What :meth:`EndpointStats.snapshot` says of an actor nobody counted yet.
EMPTY: dict[str, Any] = {"handled": 0, "busy_s": 0.0, "last_endpoint": None, "running_for_s": None, "endpoints": {}}
