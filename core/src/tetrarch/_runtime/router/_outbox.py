"""Coalescing of bursts: per-peer outboxes and the one flusher thread that writes them.

A message that follows another to the same peer within ``COALESCE_S`` of that one's write
(or while earlier ones are queued or being written, or whose sender says more follow) joins
that peer's outbox; the flusher thread writes each outbox's batch with one vectored
``send_many``. An isolated message is not queued: its sender writes it at once (the router's
``send``, which then tells :meth:`Outboxes.wrote`).
Order per peer is kept: once an outbox holds messages, every later message to that peer
queues behind them.
"""

from __future__ import annotations

import threading
from time import perf_counter as _perf_counter

from ..._log import get_logger
from ..._transport._base import Connection, ConnectionClosed
from ..plumbing import _shm_wire

__all__ = ["COALESCE_S", "Outboxes"]

_log = get_logger("router")

#: Seconds within which a message to the same peer joins a batch instead of going out alone.
COALESCE_S = 50e-6


class _Outbox:
    """Messages for one peer waiting for the flusher thread."""

    __slots__ = ("queue", "busy", "scheduled", "last", "conn")

    def __init__(self) -> None:
        self.queue: list[list] = []
        self.busy = False
        self.scheduled = False
        self.last = 0.0
        self.conn: Connection | None = None


class Outboxes:
    """The outboxes of one router and their flusher thread (``tetrarch-flush-<name>``)."""

    def __init__(self, name: str) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._boxes: dict[str, _Outbox] = {}
        self._queue: list[_Outbox] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"tetrarch-flush-{name}", daemon=True)
        self._thread.start()

    def offer(self, address: str, conn: Connection, frames: list, more: bool = False) -> bool:
        """Queue ``frames`` for ``address`` if they belong to a burst: True when queued.

        ``more``: the sender knows more messages follow (an actor's reply with calls waiting
        in its mailbox), so this one starts a burst whatever the time since the last.
        False means the message is isolated: the caller writes it itself, now.
        """
        now = _perf_counter()
        with self._lock:
            box = self._boxes.get(address)
            if box is None:
                box = self._boxes[address] = _Outbox()
            if more or box.queue or box.busy or now - box.last < COALESCE_S:
                box.queue.append(frames)
                box.conn = conn
                if not box.scheduled:
                    box.scheduled = True
                    self._queue.append(box)
                    self._cond.notify()
                return True
            box.last = now
            return False

    def wrote(self, address: str) -> None:
        """The isolated message to ``address`` (:meth:`offer` said False) is written: the window in which the
        next one joins a batch starts now, not when this one was offered. A sender whose own write takes
        longer than the window (a system call, more on a busy machine) would otherwise never see a burst,
        and each message of a pipeline would pay a write of its own."""
        box = self._boxes.get(address)
        if box is not None:
            box.last = _perf_counter()  # a float's store: no lock (a race with the flusher's only moves it)

    def close(self, timeout: float = 2.0) -> None:
        """End the flusher once it wrote what is queued (waits at most ``timeout`` seconds)."""
        with self._lock:
            self._closed = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed and not self._queue:
                    return
                boxes, self._queue = self._queue, []
                batches = []
                for box in boxes:
                    assert box.conn is not None  # set with the first queued message
                    batches.append((box, box.conn, box.queue))
                    box.queue = []
                    box.busy = True
                    box.scheduled = False
            for box, conn, batch in batches:
                try:
                    conn.send_many(batch)
                except ConnectionClosed:  # the peer is gone; pending calls fail through supervision
                    for frames in batch:
                        _shm_wire.abandon(frames)
                except Exception:  # noqa: BLE001 - the flusher thread must survive
                    _log.exception("flushing messages failed")
                with self._lock:
                    box.busy = False
                    box.last = _perf_counter()
                    if box.queue and not box.scheduled:
                        box.scheduled = True
                        self._queue.append(box)
