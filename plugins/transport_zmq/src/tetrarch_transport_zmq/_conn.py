"""One tetrarch connection over zmq: a DEALER socket (dialing side) or a ROUTER identity (listening side).

Every message on the wire starts with a tag frame, then the kernel's frames as zmq
parts (``send_multipart(copy=False)``: no concatenation; zmq itself copies parts under
``zmq.COPY_THRESHOLD``). Tags: ``b""`` data, ``OPEN`` (the dialer's first message; the
listener answers it with ``OPEN`` once ``on_open`` may run), ``CLOSE`` (orderly close).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import zmq

from tetrarch.plugins import Connection, ConnectionClosed, ConnectionHandler, TransportError

if TYPE_CHECKING:
    from ._loop import ZmqLoop

__all__ = ["CLOSE", "DATA", "OPEN", "ZmqConnection"]

Buffer = bytes | bytearray | memoryview

DATA = b""
OPEN = b"\x01"
CLOSE = b"\x02"

#: Messages a connection queues for the I/O thread before ``send`` blocks (backpressure).
MAX_QUEUED = 1 << 14


class ZmqConnection(Connection):
    """A connection; ``route`` is the ROUTER identity (listening side) or None (its own DEALER)."""

    def __init__(self, loop: ZmqLoop, sock: zmq.Socket[Any], handler: ConnectionHandler, peer: str,
                 route: bytes | None) -> None:
        self._loop = loop
        self.sock = sock
        self.handler = handler
        self._peer = peer
        self.route = route
        self._head: list[Any] = [route, DATA] if route is not None else [DATA]
        self._out: deque[list[Any]] = deque()
        self._flush_scheduled = False
        self._room = threading.Condition(threading.Lock())
        self._closed = False
        self.close_reported = False
        self.max_message_size = 1 << 62
        self.context = None
        # set by the owner
        self.monitor: zmq.Socket[Any] | None = None  # dialing side: the DEALER's monitor
        self.fd = -1  # listening side: the accepted socket's descriptor (zmq SRCFD)
        self.listener: Any = None

    @property
    def peer(self) -> str:
        return self._peer

    @property
    def closed(self) -> bool:
        return self._closed

    # -- sending (any thread) -------------------------------------------------
    def send(self, frames: Sequence[Buffer]) -> None:
        if self._closed:
            raise ConnectionClosed(f"connection to {self._peer} is closed")
        self._enqueue([*self._head, *frames])

    def send_many(self, messages: Sequence[Sequence[Buffer]]) -> None:
        if self._closed:
            raise ConnectionClosed(f"connection to {self._peer} is closed")
        for frames in messages:
            self._enqueue([*self._head, *frames])

    def _enqueue(self, msg: list[Any]) -> None:
        out = self._out
        if len(out) >= MAX_QUEUED and not self._loop.queue.in_loop():
            self._wait_room()
        out.append(msg)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.queue.call(self.flush)

    def _wait_room(self) -> None:
        with self._room:
            while len(self._out) >= MAX_QUEUED:
                if self._closed:
                    raise ConnectionClosed(f"connection to {self._peer} is closed")
                self._room.wait(0.2)

    def flush(self) -> None:
        """Hand queued messages to zmq until it pushes back (I/O thread)."""
        self._flush_scheduled = False
        out = self._out
        sock = self.sock
        full = len(out) >= MAX_QUEUED
        while out:
            try:
                sock.send_multipart(out[0], flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:  # high-water mark (or not connected yet): retried by the loop
                self._loop.retry.add(self)
                break
            except zmq.ZMQError as exc:  # EHOSTUNREACH: the ROUTER lost this peer (ROUTER_MANDATORY)
                self._loop.drop(self, TransportError(f"connection to {self._peer} broke: {exc}"))
                return
            out.popleft()
        else:
            self._loop.retry.discard(self)
        if full and len(out) < MAX_QUEUED:
            with self._room:
                self._room.notify_all()

    # -- receiving (I/O thread) -------------------------------------------------
    def deliver(self, frames: list[zmq.Frame]) -> None:
        """Check the limit and hand one data message's frames to the handler, without copying them."""
        limit = self.max_message_size
        if 4 + 8 * len(frames) > limit:
            self._loop.drop(self, TransportError(
                f"peer {self._peer} sent {len(frames)} frames (a {4 + 8 * len(frames)}-byte header; limit {limit})"))
            return
        views = [f.buffer for f in frames]
        total = sum(v.nbytes for v in views)
        if total > limit:
            self._loop.drop(self, TransportError(f"peer {self._peer} sent a {total}-byte message (limit {limit})"))
            return
        self.handler.on_message(self, views)

    # -- closing -------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.queue.call(lambda: self._loop.drop(self, None, tell_peer=True))

    def mark_closed(self) -> list[list[Any]]:
        """Mark closed (I/O thread); return what was still queued and wake blocked senders."""
        self._closed = True
        pending = list(self._out)
        self._out.clear()
        self._loop.retry.discard(self)
        with self._room:
            self._room.notify_all()
        return pending
