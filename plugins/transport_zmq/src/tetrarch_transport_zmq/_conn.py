"""One tetrarch connection over zmq: a DEALER socket (dialing side) or a ROUTER identity (listening side).

A message on the wire is the kernel's frames as zmq parts (``send(copy=False)`` per part:
no concatenation; zmq itself copies parts under ``zmq.COPY_THRESHOLD``), or a tag part of at
most one byte and what it tags. A first part of two bytes or more is a kernel message as it
is (the kernel's header always is: one part less to send and to receive per message, about
3 us of CPU on each side); a kernel message whose first frame is shorter goes behind the
data tag ``b""``. The other tags: ``OPEN`` (the dialer's first message; the listener
answers it with ``OPEN`` once ``on_open`` may run), ``CLOSE`` (orderly close).

A *large* kernel message (over :data:`MESSAGE_BYTES` bytes, over :data:`MAX_PARTS`
frames, or with a frame over :data:`CHUNK` bytes) goes as ``[BIG, header]`` (the builtin
framing's header: frame count and sizes) and then ``[PART, piece, ...]`` messages of at
most :data:`MESSAGE_BYTES` bytes each, in pieces of at most :data:`CHUNK` bytes that are
views of the kernel's frames (still no concatenation). Why: zmq hands a received
message out only in memory it allocated itself, so a ``bytes`` argument rebuilt from one
big zmq frame would be a second copy (twice the payload at the peak). The receiver
checks the header against ``max_message_size`` *before* allocating anything, reads the
pieces into buffers of its own (:func:`tetrarch.plugins` framing helpers: a large frame
lands in a fresh ``bytes`` object that becomes the argument without a copy), and frees
each zmq piece as soon as it is copied. Every zmq frame of ours is thus at most
:data:`CHUNK` bytes: the sockets' ``ZMQ_MAXMSGSIZE`` (see ``_loop.configure_socket``)
makes libzmq drop a peer, authenticated or not, that announces a bigger one.

Why 64 KiB: ``ZMQ_MAXMSGSIZE`` bounds every frame libzmq reads, the commands of its own
handshake included, so it is also what a stranger's unfinished PLAIN HELLO may make libzmq
allocate before anyone checks a key (``_gate``). At 1 MiB a stalled stranger cost a
listener 1050 KiB of memory; at 64 KiB, 86-88 KiB (libzmq's own state for a connection in its
handshake is 14-15 KiB), within ``PreAuthLimits.max_bytes``. A zmq message still carries up to
:data:`MESSAGE_BYTES` in several frames (one 64 KiB frame per message was slower still), but
each frame is a zero-copy send, a receive and a copy: on a loaded 2-core VM a 64 MiB argument
took a median 205 ms against 100 ms with 1 MiB frames (``bench_transports.py``, 3 runs each),
and a kernel frame between 64 KiB and 1 MiB, which went inline before, now goes the large
way (one copy on receipt: 256 KiB round trips 0.4 -> 0.8 ms).
"""

from __future__ import annotations

import struct
import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import zmq

from tetrarch.plugins.transport import (
    COUNT,
    MAX_FRAMES,
    Connection,
    ConnectionClosed,
    ConnectionHandler,
    TransportError,
    consume,
    header,
    nbytes,
    receive_buffers,
)

if TYPE_CHECKING:
    from ._loop import ZmqLoop

__all__ = ["BIG", "CHUNK", "CLOSE", "DATA", "MAX_PARTS", "MESSAGE_BYTES", "OPEN", "PART", "ZmqConnection", "split"]

Buffer = bytes | bytearray | memoryview

DATA = b""
OPEN = b"\x01"
CLOSE = b"\x02"
BIG = b"\x03"
PART = b"\x04"

#: The most bytes one zmq frame of ours has: every socket's ``ZMQ_MAXMSGSIZE``.
CHUNK = 64 << 10
#: The most bytes one zmq message of ours carries (in frames of at most CHUNK bytes).
MESSAGE_BYTES = 1 << 20
#: The most kernel frames sent inline in one data message (more go the large way).
MAX_PARTS = 64

#: Messages a connection queues for the I/O thread before ``send`` blocks (backpressure).
MAX_QUEUED = 1 << 14

_MORE = int(zmq.SNDMORE | zmq.NOBLOCK)  # plain ints: pyzmq's send_multipart ORs enum flags per part
_LAST = int(zmq.NOBLOCK)


def split(parts: list[zmq.Frame], at: int) -> tuple[bytes, list[zmq.Frame]]:
    """A received message's tag and the parts it tags, reading from part ``at`` (1 on a
    ROUTER, past the peer's identity); an untagged message is data and all of it the kernel's.
    ``parts`` has more than ``at`` parts."""
    first = parts[at]
    n = len(first)
    if n > 1:
        return DATA, parts[at:]
    return (first.bytes if n else DATA), parts[at + 1:]


def send_parts(sock: Any, parts: list[Any]) -> None:
    """``sock.send_multipart(parts, NOBLOCK, copy=False)`` without its per-part enum arithmetic
    (the same zmq calls: a message whose first part was taken is taken whole).

    Raises:
        zmq.ZMQError: as ``send_multipart`` (``zmq.Again`` when zmq pushes back).
    """
    for part in parts[:-1]:
        sock.send(part, _MORE, copy=False)
    sock.send(parts[-1], _LAST, copy=False)


class ZmqConnection(Connection):
    """A connection; ``route`` is the ROUTER identity (listening side) or None (its own DEALER)."""

    def __init__(self, loop: ZmqLoop, sock: zmq.Socket[Any], handler: ConnectionHandler, peer: str,
                 route: bytes | None) -> None:
        self._loop = loop
        self.sock = sock
        self.handler = handler
        self._peer = peer
        self.route = route
        self._head: list[Any] = [route] if route is not None else []  # frames before the tag
        self._out: deque[list[Any]] = deque()
        self._flush_scheduled = False
        self._room = threading.Condition(threading.Lock())
        self._closed = False
        self.close_reported = False
        self.max_message_size = 1 << 62
        self.context = None
        # a large message being received: (its frames, the views left to fill, [bytes left])
        self._large: tuple[list[memoryview], list[memoryview], list[int]] | None = None
        # set by the owner
        self.monitor: zmq.Socket[Any] | None = None  # dialing side: the DEALER's monitor
        self.fd = -1  # listening side: the accepted socket's descriptor (zmq SRCFD)
        self.ticket: Any = None  # listening side: its record in the listener's gate (_gate)
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
        self._send_one(frames)

    def send_many(self, messages: Sequence[Sequence[Buffer]]) -> None:
        if self._closed:
            raise ConnectionClosed(f"connection to {self._peer} is closed")
        msgs: list[list[Any]] = []
        for frames in messages:  # one hold of the loop's lock for the whole batch
            msgs.extend(self._zmq_messages(frames))
        self._enqueue(msgs)

    def _send_one(self, frames: Sequence[Buffer]) -> None:
        self._enqueue(self._zmq_messages(frames))

    def _zmq_messages(self, frames: Sequence[Buffer]) -> list[list[Any]]:
        """The zmq messages that carry one kernel message: one, or a large one's header and pieces."""
        if len(frames) <= MAX_PARTS:
            sizes = list(map(nbytes, frames))
            total = sum(sizes)
            if total <= CHUNK or (total <= MESSAGE_BYTES and max(sizes) <= CHUNK):
                if frames and nbytes(frames[0]) > 1:  # untagged: see the module's docstring
                    return [[*self._head, *frames]]
                return [[*self._head, DATA, *frames]]
        return self._large_parts(frames)

    def _large_parts(self, frames: Sequence[Buffer]) -> list[list[Any]]:
        """``[BIG, header]``, then the frames' bytes as ``[PART, views...]`` messages of at most
        MESSAGE_BYTES bytes, in views of at most CHUNK bytes."""
        views = [memoryview(f).cast("B") for f in frames]
        msgs: list[list[Any]] = [[*self._head, BIG, header([v.nbytes for v in views])]]
        part: list[Any] = [*self._head, PART]
        room = MESSAGE_BYTES
        for view in views:
            while view.nbytes:
                n = min(room, CHUNK)
                piece, view = view[:n], view[n:]
                part.append(piece)
                room -= n
                if room == 0 or len(part) > MAX_PARTS:
                    msgs.append(part)
                    part, room = [*self._head, PART], MESSAGE_BYTES
        if len(part) > len(self._head) + 1:
            msgs.append(part)
        return msgs

    def _enqueue(self, msgs: list[list[Any]]) -> None:
        """Send the zmq messages of one kernel message, or queue what zmq pushes back, as one unit.

        Under the loop's lock throughout: another thread's message never lands between
        the pieces of a large one (the receiver would see a broken protocol).
        """
        if len(self._out) >= MAX_QUEUED and not self._loop.queue.in_loop():
            self._wait_room()
        loop, out, sock = self._loop, self._out, self.sock
        with loop.lock_of(sock):
            sent = 0
            if not out and not self._closed and not sock.closed:  # nothing queued ahead: send from this thread
                try:
                    for msg in msgs:
                        send_parts(sock, msg)
                        sent += 1
                except zmq.ZMQError:
                    pass  # pushed back, or a lost peer: queued below, the I/O thread's flush decides
                if sent:
                    loop.after_send(sock)
                if sent == len(msgs):
                    return
            out.extend(msgs[sent:])
            schedule = not self._flush_scheduled
            self._flush_scheduled = True
        if schedule:
            loop.queue.call(self.flush)

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
        with self._loop.lock_of(sock):
            if sock.closed:
                return
            while out:
                try:
                    send_parts(sock, out[0])
                except zmq.Again:  # high-water mark (or not connected yet): retried by the loop
                    self._loop.pushed_back(self)
                    break
                except zmq.ZMQError as exc:  # EHOSTUNREACH: the ROUTER lost this peer (ROUTER_MANDATORY)
                    self._loop.drop(self, TransportError(f"connection to {self._peer} broke: {exc}"))
                    return
                out.popleft()
            else:
                self._loop.retry.discard(self)
            self._loop.after_send(sock)
        if full and len(out) < MAX_QUEUED:
            with self._room:
                self._room.notify_all()

    # -- receiving (I/O thread) -------------------------------------------------
    def receive(self, tag: bytes, frames: list[zmq.Frame]) -> bool:
        """One message of ours after its tag (I/O thread); False if ``tag`` is no data tag."""
        if tag == DATA:
            if self._large is not None:
                self._broke("a message in the middle of a large one")
            else:
                self._deliver(frames)
        elif tag == BIG:
            self._begin_large(frames)
        elif tag == PART:
            self._fill_large(frames)
        else:
            return False
        return True

    def _deliver(self, frames: list[zmq.Frame]) -> None:
        """Check the limit and hand one data message's frames to the handler, without copying them."""
        limit = self.max_message_size
        if 4 + 8 * len(frames) > limit:
            self._loop.drop(self, TransportError(
                f"peer {self._peer} sent {len(frames)} frames (a {4 + 8 * len(frames)}-byte header; limit {limit})"))
            return
        total = sum(map(len, frames))  # bytes (a Frame's len)
        if total > limit:
            self._loop.drop(self, TransportError(f"peer {self._peer} sent a {total}-byte message (limit {limit})"))
            return
        self.handler.on_message(self, [f.buffer for f in frames])

    def _begin_large(self, frames: list[zmq.Frame]) -> None:
        """A large message's header: checked against the limit before anything is allocated."""
        if self._large is not None or len(frames) != 1 or len(frames[0]) < COUNT.size:
            self._broke("a malformed large-message header")
            return
        head = frames[0].buffer
        (count,) = COUNT.unpack_from(head)
        limit = self.max_message_size
        if 4 + 8 * count > limit or count > MAX_FRAMES:
            self._loop.drop(self, TransportError(
                f"peer {self._peer} announced {count} frames (a {4 + 8 * count}-byte header; limit {limit})"))
            return
        if head.nbytes != COUNT.size + 8 * count:
            self._broke("a large-message header of the wrong length")
            return
        sizes = list(struct.unpack_from(f"!{count}Q", head, COUNT.size))
        total = sum(sizes)
        if total > limit:
            self._loop.drop(self, TransportError(f"peer {self._peer} announced a {total}-byte message (limit {limit})"))
            return
        out, targets = receive_buffers(sizes)
        self._large = (out, targets, [total])
        if not targets:
            self._finish_large()

    def _fill_large(self, frames: list[zmq.Frame]) -> None:
        if self._large is None:
            self._broke("a piece of a large message it never announced")
            return
        _, targets, left = self._large
        for frame in frames:
            data = frame.buffer
            if data.nbytes > left[0]:
                self._broke("more bytes than its large message announced")
                return
            left[0] -= data.nbytes
            while data.nbytes:
                n = min(targets[0].nbytes, data.nbytes)
                targets[0][:n] = data[:n]
                data = data[n:]
                consume(targets, n)
        if not targets:
            self._finish_large()

    def _finish_large(self) -> None:
        assert self._large is not None
        out = self._large[0]
        self._large = None
        self.handler.on_message(self, out)

    def _broke(self, what: str) -> None:
        self._loop.drop(self, TransportError(f"peer {self._peer} broke the zmq transport's protocol: {what}"))

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
