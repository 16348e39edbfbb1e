"""Per-sender order across paths: each sender's numbered messages are delivered in its order.

A call to an actor travels straight from its sender or through a relay (the host agent of
the actor's host, :mod:`..services._relay`), so two calls from one sender to one process
can overtake each other on the way. The sender numbers its sequenced messages per
receiving process (1, 2, ...; ``Router.send_call``) and names itself (``origin``: its
address and a nonce, so a process that later listens at the same address is another
sender); the receiver's :class:`Sequencer` delivers them in that order, holding one that
came early until those before it arrived.

A number can only go missing when a connection drops with it in flight: when the connection
from an origin's address closes while some of its messages wait for a number, those are
delivered (the lost ones are given up, with a warning) and from then on that origin's
messages are delivered as they come (it may go on over a new connection, and which numbers
were lost is unknown: order is given up rather than wait for good). Nothing is tracked per
message for this: the origin names its address. A relay that drops takes its host's procs
with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..._log import get_logger

__all__ = ["Sequencer"]

_log = get_logger("router")


class Sequencer:
    """Delivers each origin's sequenced messages in their numbers' order (any thread)."""

    __slots__ = ("_lock", "_next", "_held", "_unordered")

    def __init__(self) -> None:
        # Held while delivering, so two threads (the I/O thread, a self-send) cannot swap two
        # messages between their turn and their delivery; reentrant for a delivery that sends to us.
        self._lock = threading.RLock()
        self._next: dict[str, int] = {}  # origin -> the number it sends next
        self._held: dict[str, dict[int, tuple[Callable[..., None], tuple[Any, ...]]]] = {}
        self._unordered: set[str] = set()  # origins whose connection dropped: delivered as they come

    def admit(self, origin: str, seq: int, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` now if ``seq`` is ``origin``'s next number, else when its turn comes."""
        with self._lock:
            expected = self._next.get(origin, 1)
            if seq == expected:  # the common case: in order
                self._next[origin] = seq + 1
                fn(*args)
                if self._held:
                    held = self._held.get(origin)
                    if held:
                        self._drain(origin, held)
                return
            if seq > expected and origin not in self._unordered:
                self._held.setdefault(origin, {})[seq] = (fn, args)
                return
        fn(*args)  # late (its turn was given up), or order was given up: never dropped

    def _drain(self, origin: str, held: dict[int, tuple[Callable[..., None], tuple[Any, ...]]]) -> None:
        nxt = self._next[origin]
        while nxt in held:
            fn, args = held.pop(nxt)
            nxt += 1
            self._next[origin] = nxt
            fn(*args)
        if not held:
            del self._held[origin]

    def peer_lost(self, address: str) -> None:
        """The connection from ``address`` closed: what it carried in flight is lost.

        The messages that origins of that address (``address#nonce``) had waiting for one of
        those are delivered now, in order, and those origins' later messages as they come.
        """
        prefix = f"{address}#"
        with self._lock:
            for origin in [o for o in self._held if o.startswith(prefix)]:
                held = self._held.pop(origin)
                _log.warning("the connection from %s closed with %d message(s) of %s waiting behind one it "
                             "had not delivered: delivering them now", address, len(held), origin)
                for seq in sorted(held):
                    fn, args = held[seq]
                    self._next[origin] = seq + 1
                    fn(*args)
                self._unordered.add(origin)

    def holding(self) -> int:
        """How many messages wait for their turn (for tests and introspection)."""
        with self._lock:
            return sum(len(h) for h in self._held.values())
