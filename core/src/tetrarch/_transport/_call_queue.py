"""The call queue of a transport's I/O loop: callables posted from any thread, and the
descriptor (an ``eventfd``) that wakes the thread reading for the loop. Exported from
``tetrarch.plugins``; :class:`~._loop.LeaderLoop` holds one, and a plugin's own loop may too.
"""

from __future__ import annotations

import os
import weakref
from _thread import get_ident as _get_ident
from collections import deque
from collections.abc import Callable

from .._log import get_logger

__all__ = ["CallQueue"]

_log = get_logger("transport")


def close_fds(fds: set[int]) -> None:
    """Close each of ``fds``, ignoring any already closed."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class CallQueue:
    """Callables for an I/O loop, and the file descriptor that wakes it.

    ``call(fn)`` from any thread appends ``fn`` and wakes the loop (one write per batch:
    no write while a wake-up is pending); the loop polls :meth:`fileno` for reading and
    calls :meth:`run_pending`. The owner is the thread reading for the loop now
    (:meth:`bind`, :meth:`unbind`); ``call`` from that thread runs ``fn`` at once, and
    ``on_orphan`` runs when a call is queued while nobody owns the queue.
    """

    def __init__(self, on_orphan: Callable[[], None] | None = None) -> None:
        self._calls: deque[Callable[[], None]] = deque()
        self._owner: int | None = None  # the owner's thread ident (a C call to compare, not current_thread())
        self._on_orphan = on_orphan  # called when a call is queued while no thread owns the queue
        self._armed = False  # a wake-up is written and not yet consumed
        if hasattr(os, "eventfd"):
            self._rfd = self._wfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:  # pragma: no cover - not Linux
            self._rfd, self._wfd = os.pipe()
            os.set_blocking(self._rfd, False)
            os.set_blocking(self._wfd, False)
        # Released when the queue goes, not when its loop ends: another thread may be in
        # ``wake`` then, and a number closed early could name another descriptor by the time
        # it writes (see LeaderLoop's park descriptor).
        self._finalizer = weakref.finalize(self, close_fds, {self._rfd, self._wfd})
        self._finalizer.atexit = False  # at exit a loop may still wait on it: the process closes it

    def bind(self) -> None:
        """Make the calling thread the owner (the thread that reads for the loop now)."""
        self._owner = _get_ident()

    def pending(self) -> bool:
        """Whether calls wait to be run."""
        return bool(self._calls)

    def unbind(self) -> None:
        """No thread owns the queue (the owner stepped aside); calls queue up and wake the loop."""
        self._owner = None

    def in_loop(self) -> bool:
        return _get_ident() == self._owner

    def fileno(self) -> int:
        return self._rfd

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the thread reading for the loop: now if this is it, else soon (in call order)."""
        if self._owner == _get_ident():
            fn()
            return
        self._calls.append(fn)
        if self._owner is None and self._on_orphan is not None:
            self._on_orphan()
        self.wake()

    def wake(self) -> None:
        """Wake the thread polling :meth:`fileno` (no write while a wake-up is pending)."""
        if not self._armed:
            self._armed = True
            try:
                os.write(self._wfd, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            except (BlockingIOError, OSError):
                pass

    def run_pending(self) -> None:
        """Consume the wake-up and run every queued callable (the thread reading for the loop).

        A callable that raises is logged; the others still run (the I/O thread must survive).
        """
        # Consume the wake-up first, then disarm: a wake-up written in between stays
        # unread and wakes the loop again. (Disarming first lost wake-ups: a write that
        # landed between the two was consumed here while ``_armed`` stayed True, so no
        # later ``call`` wrote again and the loop slept on calls it never ran.)
        try:
            os.read(self._rfd, 4096)
        except (BlockingIOError, OSError):
            pass
        self._armed = False
        calls = self._calls
        while calls:
            fn = calls.popleft()
            try:
                fn()
            except Exception:  # noqa: BLE001 - one faulty call must not end the loop
                _log.exception("transport I/O thread: a posted call failed")

    def close(self) -> None:
        """Release the file descriptor(s) now (only when no other thread can call :meth:`call`
        or :meth:`wake` any more; otherwise they go with the queue). Idempotent."""
        self._rfd = self._wfd = -1
        self._finalizer()
