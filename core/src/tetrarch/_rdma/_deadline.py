"""One timer thread failing futures whose deadline passed (no thread per transfer)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from concurrent.futures import Future
from typing import Any

from .._errors import FutureTimeoutError

__all__ = ["Deadlines"]


class Deadlines:
    """``fail_after(fut, seconds, what)``: ``fut`` gets ``TimeoutError`` unless done in time."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Future[Any], str]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._closed = False
        self._thread: threading.Thread | None = None

    def fail_after(self, fut: Future[Any], seconds: float, what: str) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tetrarch-rdma-deadlines", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._seq), fut, f"{what} ({seconds:g} s)"))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    if self._heap and self._heap[0][2].done():
                        heapq.heappop(self._heap)
                        continue
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._closed:
                    return
                _, _, fut, what = heapq.heappop(self._heap)
            if not fut.done():
                try:
                    fut.set_exception(FutureTimeoutError(f"{what} timed out; pass a larger timeout= if the "
                                                         f"transfer is just slow"))
                except Exception:  # noqa: BLE001 - completed meanwhile
                    pass

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
