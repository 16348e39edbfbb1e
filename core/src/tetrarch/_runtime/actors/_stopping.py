"""Small pieces of an actor's stop: its end reported once, and the wait for its children's stops."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..values._future import Future

__all__ = ["Once", "wait_all"]


class Once:
    """``fn`` called at the first call, from any thread; later calls do nothing."""

    __slots__ = ("fn", "lock")

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn: Callable[[], None] | None = fn
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            fn, self.fn = self.fn, None
        if fn is not None:
            fn()


def wait_all(futures: list[Future[None]], timeout: float) -> None:
    """Wait for each of ``futures`` up to ``timeout`` s; their failures are ignored (never raises)."""
    for fut in futures:
        try:
            fut.get(timeout)
        except BaseException:  # noqa: BLE001 - a child that failed to stop cleanly is stopped anyway
            pass
