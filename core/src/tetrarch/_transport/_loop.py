"""A transport's one I/O thread: an epoll loop over readable descriptors, posted calls and timers.

The kernel's threading contract (``_base.py``) wants every handler callback of a
transport on one thread. This loop is that thread for the builtin socket transport and
for plugins (exported from ``tetrarch.plugins`` as ``IoLoop``): other threads post work
with :meth:`IoLoop.call`, which queues it on a :class:`CallQueue` (an ``eventfd``
written once per batch); a loop of its own (zmq's ``Poller``) uses a CallQueue directly. A descriptor registered with
:meth:`IoLoop.watch` gets its object's ``on_readable()`` called here whenever it is
readable (a socket, or a library's pollable descriptor such as nng's ``recv_fd``);
:meth:`IoLoop.later` runs a timer.
"""

from __future__ import annotations

import heapq
import itertools
import os
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from .._log import get_logger

__all__ = ["CallQueue", "IoLoop", "Readable"]

_log = get_logger("transport")


class Readable(Protocol):
    def on_readable(self) -> None:
        """The socket behind the registered descriptor has messages (I/O thread)."""

    def on_error(self, exc: BaseException) -> None:
        """``on_readable`` raised ``exc`` (I/O thread)."""


class CallQueue:
    """Callables for one I/O thread, and the file descriptor that wakes it.

    ``call(fn)`` from any thread appends ``fn`` and wakes the loop (one write per batch:
    no write while a wake-up is pending); the loop polls :meth:`fileno` for reading and
    calls :meth:`run_pending`. The owner thread is set by :meth:`bind` (the loop's first
    act); ``call`` from that thread runs ``fn`` at once.
    """

    def __init__(self) -> None:
        self._calls: deque[Callable[[], None]] = deque()
        self._owner: threading.Thread | None = None
        self._armed = False  # a wake-up is written and not yet consumed
        if hasattr(os, "eventfd"):
            self._rfd = self._wfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:  # pragma: no cover - not Linux
            self._rfd, self._wfd = os.pipe()
            os.set_blocking(self._rfd, False)
            os.set_blocking(self._wfd, False)

    def bind(self) -> None:
        """Make the calling thread the owner (the I/O thread)."""
        self._owner = threading.current_thread()

    def in_loop(self) -> bool:
        return threading.current_thread() is self._owner

    def fileno(self) -> int:
        return self._rfd

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread: now if this is it, else soon (in call order)."""
        if self._owner is threading.current_thread():
            fn()
            return
        self._calls.append(fn)
        if not self._armed:
            self._armed = True
            try:
                os.write(self._wfd, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            except (BlockingIOError, OSError):
                pass

    def run_pending(self) -> None:
        """Consume the wake-up and run every queued callable (I/O thread).

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
        """Release the file descriptor(s). Idempotent."""
        for fd in {self._rfd, self._wfd}:
            try:
                os.close(fd)
            except OSError:
                pass
        self._rfd = self._wfd = -1


class IoLoop:
    """One thread watching a transport's descriptors and running its posted calls and timers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._sel = selectors.DefaultSelector()
        self._queue = CallQueue()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._sel.register(self._queue.fileno(), selectors.EVENT_READ, None)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"tetrarch-io-{name}", daemon=True)
        self._thread.start()

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread (now, if already there)."""
        self._queue.call(fn)

    def later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread after ``delay`` seconds (call from the I/O thread)."""
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), fn))

    def watch(self, fd: int | socket.socket, obj: Readable) -> None:
        """Call ``obj.on_readable()`` whenever ``fd`` (a descriptor or a socket) is readable (I/O thread)."""
        self._sel.register(fd, selectors.EVENT_READ, obj)

    def unwatch(self, fd: int | socket.socket) -> None:
        """Stop watching ``fd``, before the socket that owns it is closed (I/O thread)."""
        try:
            self._sel.unregister(fd)
        except (KeyError, ValueError, OSError):
            pass

    def _run(self) -> None:
        sel = self._sel
        queue = self._queue
        queue.bind()
        while not self._stopped:
            timeout = None
            if self._timers:
                timeout = max(0.0, self._timers[0][0] - time.monotonic())
            for key, _ in sel.select(timeout):
                obj = key.data
                if obj is None:
                    queue.run_pending()
                    continue
                try:
                    obj.on_readable()
                except Exception as exc:  # noqa: BLE001 - a handler bug closes one connection only
                    _log.error("%s transport: closing after a handler error: %r", self.name, exc)
                    obj.on_error(exc)
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                fn = heapq.heappop(self._timers)[2]
                try:
                    fn()
                except Exception:  # noqa: BLE001
                    _log.exception("%s transport: a timer failed", self.name)
        self._sel.close()
        queue.close()

    def stop(self, before: Callable[[], None] | None = None, *, wait: float = 5.0) -> None:
        """Run ``before`` on the I/O thread, then end it; wait up to ``wait`` seconds for it
        (not when called on the I/O thread itself). Idempotent."""

        def do() -> None:
            if self._stopped:
                return
            if before is not None:
                before()
            self._stopped = True

        self.call(do)
        if wait > 0 and not self.in_loop():
            self._thread.join(wait)
