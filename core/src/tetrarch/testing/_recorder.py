"""A ``ConnectionHandler`` that records every callback, for the transport kits."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from tetrarch._transport._base import Connection

from ._kit import WAIT

__all__ = ["Recorder"]


def _as_bytes(frames: Sequence[Any]) -> list[bytes]:
    return [bytes(f) for f in frames]


class Recorder:
    """A ``ConnectionHandler`` that records every callback and lets tests wait for them.

    ``on_open_hook(conn)``, when set, runs inside ``on_open`` (e.g. to lower
    ``conn.max_message_size`` before any message is read).
    """

    def __init__(self, on_open_hook: Callable[[Connection], None] | None = None) -> None:
        self._cond = threading.Condition()
        self._on_open_hook = on_open_hook
        self.opened: list[Connection] = []
        self._messages: dict[int, list[list[memoryview]]] = {}
        self._closes: dict[int, list[BaseException | None]] = {}
        self._order: dict[int, list[str]] = {}  # per connection: "open", "message", "close"
        self.message_threads: set[int] = set()

    # -- ConnectionHandler -------------------------------------------------
    def on_open(self, conn: Connection) -> None:
        if self._on_open_hook is not None:
            self._on_open_hook(conn)
        with self._cond:
            self.opened.append(conn)
            self._order.setdefault(id(conn), []).append("open")
            self._cond.notify_all()

    def on_message(self, conn: Connection, frames: list[memoryview]) -> None:
        with self._cond:
            self.message_threads.add(threading.get_ident())
            self._messages.setdefault(id(conn), []).append(list(frames))
            self._order.setdefault(id(conn), []).append("message")
            self._cond.notify_all()

    def on_close(self, conn: Connection, error: BaseException | None) -> None:
        with self._cond:
            self._closes.setdefault(id(conn), []).append(error)
            self._order.setdefault(id(conn), []).append("close")
            self._cond.notify_all()

    # -- queries -------------------------------------------------------------
    def messages(self, conn: Connection) -> list[list[memoryview]]:
        with self._cond:
            return list(self._messages.get(id(conn), ()))

    def closes(self, conn: Connection) -> list[BaseException | None]:
        with self._cond:
            return list(self._closes.get(id(conn), ()))

    def order(self, conn: Connection) -> list[str]:
        with self._cond:
            return list(self._order.get(id(conn), ()))

    def _find(self, frames: list[bytes]) -> Connection | None:
        """The connection that received a message equal to ``frames`` (lock held)."""
        for conn in self.opened:
            if any(_as_bytes(m) == frames for m in self._messages.get(id(conn), ())):
                return conn
        return None

    # -- waiting ---------------------------------------------------------------
    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        """Block until ``predicate()`` (evaluated under the lock) holds, or fail."""
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    def wait_opened(self, count: int = 1) -> Connection:
        """Wait for the ``count``-th accepted connection and return it."""
        self.wait(lambda: len(self.opened) >= count, f"on_open #{count}")
        with self._cond:
            return self.opened[count - 1]

    def wait_messages(self, conn: Connection, count: int) -> list[list[memoryview]]:
        self.wait(lambda: len(self._messages.get(id(conn), ())) >= count, f"{count} message(s) from {conn.peer}")
        return self.messages(conn)

    def wait_closed(self, conn: Connection) -> BaseException | None:
        self.wait(lambda: id(conn) in self._closes, f"on_close of {conn.peer}")
        return self.closes(conn)[0]

    def wait_any_closed(self, count: int = 1) -> list[Connection]:
        """Wait until ``count`` accepted connections saw ``on_close``; return those closed.

        Use it when a test closes a connection from the dialing side: the order in which a
        listener accepts concurrent dials need not follow the order they were made in.
        """
        def closed() -> list[Connection]:
            return [c for c in self.opened if id(c) in self._closes]
        self.wait(lambda: len(closed()) >= count, f"on_close of {count} accepted connection(s)")
        with self._cond:
            return closed()
