"""A thread-safe list that tests wait on: callbacks add items, the test waits for n of them."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

from ._timing import scaled, slowdown

__all__ = ["Collector"]

T = TypeVar("T")

#: How many items a timeout message shows.
_SHOWN = 10


class Collector(Generic[T]):
    """Items handed in by other threads (callbacks, hooks), kept in arrival order.

    Pass :meth:`add` where a one-argument callback is expected, then block on
    :meth:`wait` instead of sleeping::

        faults: Collector[MeshFailure] = Collector("failures at the fault hook")
        tetrarch.unhandled_fault_hook = faults.add
        ...
        (failure,) = faults.wait(1)

    Args:
        what: what the items are, for the message of a :meth:`wait` that times out.
    """

    def __init__(self, what: str = "items") -> None:
        self.what = what
        self._items: list[T] = []
        self._cond = threading.Condition()

    def add(self, item: T) -> None:
        """Append ``item`` and wake every thread in :meth:`wait`. Safe from any thread."""
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    def clear(self) -> None:
        """Forget every item collected so far."""
        with self._cond:
            self._items.clear()

    @property
    def items(self) -> list[T]:
        """A snapshot (a new list) of the items collected so far, in arrival order."""
        with self._cond:
            return list(self._items)

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def __repr__(self) -> str:
        return f"Collector({self.what!r}, {len(self)} item(s))"

    def wait(self, n: int, timeout: float = 10.0) -> list[T]:
        """Block until at least ``n`` items arrived; return a snapshot of all of them, in order.

        Args:
            n: how many items to wait for (``0`` returns at once).
            timeout: nominal seconds, multiplied by the ``TETRARCH_TEST_SLOWDOWN`` factor
                (see :func:`tetrarch.testing.scaled`).

        Raises:
            TimeoutError: fewer than ``n`` items arrived in time; the message says how
                many did and shows them.
            ValueError: ``n`` is negative.
        """
        if n < 0:
            raise ValueError(f"cannot wait for a negative number of items ({n})")
        limit = scaled(timeout)
        with self._cond:
            if self._cond.wait_for(lambda: len(self._items) >= n, limit):
                return list(self._items)
            got = list(self._items)
        shown = ", ".join(repr(item) for item in got[:_SHOWN])
        more = f", ... and {len(got) - _SHOWN} more" if len(got) > _SHOWN else ""
        factor = slowdown()
        limit_text = f"{limit:g} s" if factor == 1.0 else f"{limit:g} s ({timeout:g} s x slowdown {factor:g})"
        raise TimeoutError(f"expected {n} {self.what} within {limit_text}, but {len(got)} arrived: "
                           f"[{shown}{more}]")
