"""A transport's one I/O thread: an epoll loop over readable descriptors, posted calls and timers.

The kernel's threading contract (``_base.py``) wants every handler callback of a
transport on one thread. This loop is that thread for the builtin socket transport and
for plugins (exported from ``tetrarch.plugins`` as ``IoLoop``): other threads post work
with :meth:`IoLoop.call`; a descriptor registered with :meth:`IoLoop.watch` gets its
object's ``on_readable()`` called here whenever it is readable (a socket, or a library's
pollable descriptor such as nng's ``recv_fd``); :meth:`IoLoop.later` runs a timer.
"""

from __future__ import annotations

import heapq
import itertools
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from .._log import get_logger

__all__ = ["IoLoop", "Readable"]

_log = get_logger("transport")


class Readable(Protocol):
    def on_readable(self) -> None:
        """The socket behind the registered descriptor has messages (I/O thread)."""

    def on_error(self, exc: BaseException) -> None:
        """``on_readable`` raised ``exc`` (I/O thread)."""


class IoLoop:
    """One thread watching a transport's descriptors and running its posted calls and timers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._sel = selectors.DefaultSelector()
        self._calls: deque[Callable[[], None]] = deque()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopped = False
        self._on_stop: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._run, name=f"tetrarch-io-{name}", daemon=True)
        self._thread.start()

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread (now, if already there)."""
        if self.in_loop():
            fn()
            return
        self._calls.append(fn)
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

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
        while not self._stopped:
            timeout = None
            if self._timers:
                timeout = max(0.0, self._timers[0][0] - time.monotonic())
            if self._calls:
                timeout = 0.0
            for key, _ in sel.select(timeout):
                obj = key.data
                if obj is None:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except OSError:
                        pass
                    continue
                try:
                    obj.on_readable()
                except Exception as exc:  # noqa: BLE001 - a handler bug closes one connection only
                    _log.error("%s transport: closing after a handler error: %r", self.name, exc)
                    obj.on_error(exc)
            while self._calls:
                fn = self._calls.popleft()
                try:
                    fn()
                except Exception:  # noqa: BLE001 - the I/O thread must survive
                    _log.exception("%s transport: a posted call failed", self.name)
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                fn = heapq.heappop(self._timers)[2]
                try:
                    fn()
                except Exception:  # noqa: BLE001
                    _log.exception("%s transport: a timer failed", self.name)
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

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
