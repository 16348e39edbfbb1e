"""One tetrarch connection = one nng ``pair0`` socket with exactly one pipe.

Both sides hand nng a connected stream descriptor (:func:`hand_over`: a ``socket://``
listener on the connection's own ``pair0`` socket takes it), so nng runs its SP header
exchange and its framing (nng's TCP framing: an 8-byte length per message, on Unix
sockets too) over a connection this plugin accepted or dialed itself. The pipe that
exchange adds is the connection's only one: nng neither redials nor accepts another.

Framing: each tetrarch message is the core framing (``!I`` frame count, ``!Q`` lengths,
frames; :mod:`tetrarch.plugins.transport`) written into nng messages. A message of at
most :data:`CHUNK` bytes (header included) is one nng message; several such messages of
one ``send_many`` share an nng message while they fit; a bigger message is cut into
:data:`CHUNK`-byte nng messages. The cut is what keeps a peer nobody vouched for cheap:
nng's ``recv_max_size`` is fixed per pipe when the pipe is created and nng allocates a
message's announced length before reading it, so with one nng message per tetrarch
message the bound would have to be the largest message ever sent (512 MiB arrays)
for authenticated and unauthenticated peers alike. With chunks, nng holds at most
``CHUNK`` bytes of a message before this code reads its header, and a frame count or
total over ``max_message_size`` closes the connection before anything more is buffered.

Copies: nng messages are single buffers (``nng_msg``), so sending copies each frame
once into the nng message (``nng_msg_alloc`` + ``memmove``; no intermediate ``bytes``).
On receive, a message that lies in one nng message is handed over as memoryviews into
that nng message's body (no copy; the nng message is freed when the last view goes);
a chunked one is assembled into buffers allocated for it, large frames into ``bytes``
the kernel adopts without another copy.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pynng
from pynng import ffi, lib

from tetrarch.plugins.transport import (
    COUNT,
    MAX_FRAMES,
    Buffer,
    Connection,
    ConnectionClosed,
    ConnectionHandler,
    TransportError,
    batch_helper_threads,
    consume,
    header,
    helper_thread_policy,
    nbytes,
    receive_buffers,
)

if TYPE_CHECKING:
    from tetrarch.plugins.transport import IoLoop

__all__ = ["CHUNK", "PAIR0_HEADER", "RECV_BUFFER", "NngConnection", "hand_over", "pair_socket"]

#: The largest nng message this transport sends, and every data socket's ``recv_max_size``.
CHUNK = 1 << 16
#: What nng sends first on a ``pair0`` socket's connection (SP header: protocol 0x10, pair v0).
PAIR0_HEADER = b"\0SP\0\x00\x10\0\0"
#: Messages nng queues per socket before this side reads them (each at most ``CHUNK`` bytes).
RECV_BUFFER = 8
#: Messages nng queues per socket for sending (room for the kernel's small control messages,
#: which the I/O thread sends without blocking: ``NngConnection._sendmsg``).
_SEND_BUFFER = 64
#: nng's task threads in this process (nng's default: twice the CPUs). They run nng's internal
#: completions only (every callback of ours runs on the transport's loop), and each message
#: hands off to them about twice; with fewer, more hand-offs find one awake. 8-proc round on 2
#: cores, 6 alternations: 1.13-1.24 ms with nng's 4, 1.07-1.14 ms with 2 (nng's minimum).
#: Set before nng starts (it ignores the call once running, e.g. after a program's own use of pynng).
_TASK_THREADS = 2
if hasattr(lib, "nng_init_set_parameter"):  # nng 1.8+
    lib.nng_init_set_parameter(lib.NNG_INIT_NUM_TASK_THREADS, _TASK_THREADS)
#: Messages one socket takes per wake-up before others get their turn.
_BATCH = 64
_NONBLOCK = lib.NNG_FLAG_NONBLOCK
_EAGAIN = lib.NNG_EAGAIN


def _free_msg(msg: Any) -> Any:
    return lambda _body: lib.nng_msg_free(msg)


def body_view(msg: Any) -> memoryview:
    """The body of ``msg`` (an ``nng_msg *`` now owned by the view): freed when the view is gone."""
    n = lib.nng_msg_len(msg)
    body = ffi.gc(ffi.cast("char *", lib.nng_msg_body(msg)), _free_msg(msg), n)
    return memoryview(ffi.buffer(body, n))


#: How many of this process's first sockets look for nng's helper threads (see pair_socket).
_THREAD_LOOKS = 8
_looks = 0


_first_socket = threading.Lock()
_nng_started = False


def _open_pair(recv_buffer: int) -> pynng.Pair0:
    return pynng.Pair0(recv_max_size=CHUNK, recv_buffer_size=recv_buffer, send_buffer_size=_SEND_BUFFER)


def _first_pair(recv_buffer: int) -> pynng.Pair0:
    """The process's first socket, opened under the helper threads' policy: nng starts all its threads
    (task queue, reaper, timers, resolver, poller) while it opens its first socket, and a new thread
    takes its creator's policy, so every one of them is born with it, however late it names itself."""
    global _nng_started
    with _first_socket:
        if _nng_started:
            return _open_pair(recv_buffer)
        policy = helper_thread_policy()
        mine = os.sched_getscheduler(0) if policy is not None else None
        try:
            if policy is not None and mine == os.SCHED_OTHER:
                os.sched_setscheduler(0, policy, os.sched_param(0))
            return _open_pair(recv_buffer)
        finally:
            _nng_started = True
            if policy is not None and mine == os.SCHED_OTHER:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def pair_socket(recv_buffer: int = RECV_BUFFER) -> pynng.Pair0:
    """A fresh ``pair0`` socket for one connection (its descriptor comes with :func:`hand_over`)."""
    global _looks
    sock = _open_pair(recv_buffer) if _nng_started else _first_pair(recv_buffer)
    # Threads nng may start later (and any a policy change missed) are caught by a look at the
    # process's next few sockets. Only the first few: a flood of connections must not cost a
    # /proc scan each.
    if _looks < _THREAD_LOOKS:
        _looks += 1
        batch_helper_threads("nng:")
    return sock


def hand_over(sock: pynng.Socket, fd: int) -> None:
    """Give nng the connected stream descriptor ``fd`` for ``sock``: nng owns it from here on.

    nng sends its SP header at once, reads the peer's and then adds the pipe (``sock``'s pipe
    callbacks run); closing ``sock`` closes ``fd``.

    Raises:
        OSError: nng refused the descriptor (``fd`` is closed then), e.g. a pynng whose nng
            (older than 1.9) lacks the ``socket://`` transport.
    """
    lp = ffi.new("nng_listener *")
    rv = lib.nng_listener_create(lp, sock.socket, b"socket://")
    if rv == 0:
        rv = lib.nng_listener_start(lp[0], 0)
        if rv == 0:
            rv = lib.nng_listener_set_int(lp[0], b"socket:fd", fd)
    if rv != 0:
        os.close(fd)
        raise OSError(f"nng did not take the connection: {ffi.string(lib.nng_strerror(rv)).decode()} "
                      "(the nng transport needs pynng with nng 1.9 or later: pip install -U pynng)")


def new_msg(size: int) -> tuple[Any, Any]:
    """A fresh ``nng_msg *`` of ``size`` bytes and a ``char *`` to its body.

    Raises:
        MemoryError: nng could not allocate it.
    """
    msg_p = ffi.new("nng_msg **")
    if lib.nng_msg_alloc(msg_p, size) != 0:
        raise MemoryError(f"nng could not allocate a {size}-byte message")
    return msg_p[0], ffi.cast("char *", lib.nng_msg_body(msg_p[0]))


class NngConnection(Connection):
    """A connection over one pair0 socket (dialed, or accepted by a listener)."""

    def __init__(self, loop: IoLoop, sock: pynng.Socket, handler: ConnectionHandler, peer: str) -> None:
        self._loop = loop
        self._sock = sock
        self._raw = sock.socket
        self._fd = -1  # nng's readiness descriptor (a pipe: two), made in start(): none while a stranger waits
        self._handler = handler
        self._peer = peer
        self._wlock = threading.Lock()
        self._closed = False
        #: False once nng reported this connection's pipe removed (set on nng's thread, before
        #: the I/O thread hears of it): a send on a pair0 socket without a pipe would wait forever.
        self.pipe_alive = True
        self._close_reported = False
        self._started = False
        self._watched = False
        self.max_message_size = 1 << 62
        self.context = None
        # receive state (I/O thread only)
        self._hbuf: bytearray | None = None  # a header cut by a chunk boundary
        self._hneed = 0
        self._fill: tuple[list[memoryview], list[memoryview]] | None = None

    # -- Connection API -------------------------------------------------
    @property
    def peer(self) -> str:
        return self._peer

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, frames: Sequence[Buffer]) -> None:
        sizes = [nbytes(f) for f in frames]
        hdr = header(sizes)
        total = len(hdr) + sum(sizes)
        with self._wlock:
            if self._closed:
                raise ConnectionClosed(f"connection to {self._peer} is closed")
            if total <= CHUNK:
                self._send_one([(hdr, frames, sizes)], total)
            else:
                self._send_chunked(hdr, frames, sizes, total)

    def send_many(self, messages: Sequence[Sequence[Buffer]]) -> None:
        with self._wlock:
            if self._closed:
                raise ConnectionClosed(f"connection to {self._peer} is closed")
            batch: list[tuple[bytes, Sequence[Buffer], list[int]]] = []
            batch_size = 0
            for frames in messages:
                sizes = [nbytes(f) for f in frames]
                hdr = header(sizes)
                total = len(hdr) + sum(sizes)
                if batch and batch_size + total > CHUNK:
                    self._send_one(batch, batch_size)
                    batch, batch_size = [], 0
                if total > CHUNK:
                    self._send_chunked(hdr, frames, sizes, total)
                else:
                    batch.append((hdr, frames, sizes))
                    batch_size += total
            if batch:
                self._send_one(batch, batch_size)

    def _send_one(self, parts: list[tuple[bytes, Sequence[Buffer], list[int]]], total: int) -> None:
        """Whole messages (at most ``CHUNK`` bytes together) as one nng message (lock held)."""
        msg, body = new_msg(total)
        off = 0
        memmove = ffi.memmove
        for hdr, frames, sizes in parts:
            n = len(hdr)
            memmove(body + off, hdr, n)
            off += n
            for f, n in zip(frames, sizes, strict=True):
                if n:
                    memmove(body + off, f, n)
                    off += n
        self._sendmsg(msg)

    def _send_chunked(self, hdr: bytes, frames: Sequence[Buffer], sizes: list[int], total: int) -> None:
        """One message cut into ``CHUNK``-byte nng messages (lock held: chunks never interleave)."""
        left = total
        msg, body = new_msg(min(CHUNK, left))
        cap, off = min(CHUNK, left), 0
        pieces: list[Buffer] = [hdr]
        pieces.extend(f for f, n in zip(frames, sizes, strict=True) if n)
        for piece in pieces:
            view = memoryview(piece)
            if view.format != "B" or view.ndim != 1:
                view = view.cast("B")
            pos, end = 0, view.nbytes
            while pos < end:
                k = min(cap - off, end - pos)
                ffi.memmove(body + off, view[pos : pos + k], k)
                off += k
                pos += k
                if off == cap:
                    self._sendmsg(msg)
                    left -= cap
                    if left:
                        cap, off = min(CHUNK, left), 0
                        msg, body = new_msg(cap)

    def _sendmsg(self, msg: Any) -> None:
        # Other threads block while nng's queue is full (backpressure). The I/O thread must
        # not block for good: it serves every connection, and a send on a pair0 socket whose
        # pipe is gone waits forever. So it sends without blocking and, while the queue is full
        # (another thread's large message is going out), retries as long as the pipe lives.
        if self._loop.in_loop():
            while True:
                rv = lib.nng_sendmsg(self._raw, msg, lib.NNG_FLAG_NONBLOCK)
                if rv != lib.NNG_EAGAIN or not self.pipe_alive or self._closed:
                    break
                time.sleep(0.0005)  # back off while the peer reads the queue (not synchronization)
        else:
            rv = lib.nng_sendmsg(self._raw, msg, 0)
        if rv != 0:
            lib.nng_msg_free(msg)
            self.close()
            why = ("its pipe is gone" if rv == lib.NNG_EAGAIN else ffi.string(lib.nng_strerror(rv)).decode())
            raise ConnectionClosed(f"connection to {self._peer} is closed ({why})")

    def wait_senders(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) until no thread is sending (after :meth:`drop` closed the socket)."""
        if self._wlock.acquire(timeout=timeout):
            self._wlock.release()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call(lambda: self.drop(None))

    # -- receive side (I/O thread) ----------------------------------------
    def start(self) -> None:
        """Start delivering messages (I/O thread; after ``on_open``); a pipe gone meanwhile closes it."""
        self._started = True
        if self._closed:
            self.drop(None)
            return
        try:
            self._fd = self._sock.recv_fd
        except pynng.NNGException as exc:  # no descriptor left for nng's notification pipe
            self.drop(TransportError(f"cannot read the connection to {self._peer}: {exc}"))
            return
        self._loop.watch(self._fd, self)
        self._watched = True
        if not self.pipe_alive:
            self.pipe_gone()

    def recv_nowait(self) -> Any:
        """The next ``nng_msg *`` waiting on the socket, or None."""
        msg_p = ffi.new("nng_msg **")
        rv = lib.nng_recvmsg(self._raw, msg_p, _NONBLOCK)
        if rv == 0:
            return msg_p[0]
        if rv != _EAGAIN:
            self.drop(None)
        return None

    def on_readable(self) -> None:
        for _ in range(_BATCH):
            if self._closed:
                return
            msg = self.recv_nowait()
            if msg is None:
                return
            self.feed(body_view(msg))

    def on_error(self, exc: BaseException) -> None:
        self.drop(exc)

    def pipe_gone(self) -> None:
        """The peer's pipe went away (posted from nng's thread): deliver what it sent, then close.

        Before :meth:`start` it waits for it (the handler may not have had ``on_open`` yet)."""
        if self._closed or not self._started:  # closed here: the drop that closed the socket reports it
            return
        while not self._closed:
            msg = self.recv_nowait()
            if msg is None:
                break
            self.feed(body_view(msg))
        self.drop(None)

    def drop(self, error: BaseException | None) -> None:
        """Close for good and report it once (I/O thread)."""
        self._closed = True
        self._hbuf = None
        self._fill = None
        if self._watched:
            self._watched = False
            self._loop.unwatch(self._fd)
        try:
            self._sock.close()  # the peer's pipe goes away: it learns at once; blocked senders return
        except Exception:  # noqa: BLE001 - closing twice or a socket nng already tore down
            pass
        if self._close_reported:
            return
        self._close_reported = True
        try:
            self._handler.on_close(self, error)
        except Exception:  # noqa: BLE001
            pass

    def _refuse(self, why: str) -> None:
        self.drop(TransportError(f"peer {self._peer} {why}"))

    def _check_count(self, count: int) -> bool:
        hlen = 4 + 8 * count
        if count > MAX_FRAMES or hlen > self.max_message_size:
            self._refuse(f"announced {count} frames (a {hlen}-byte header; limits {MAX_FRAMES} frames, "
                         f"{self.max_message_size} bytes)")
            return False
        return True

    def _check_total(self, sizes: Sequence[int]) -> bool:
        total = sum(sizes)
        if total > self.max_message_size:
            self._refuse(f"sent a {total}-byte message (limit {self.max_message_size})")
            return False
        return True

    def feed(self, mv: memoryview) -> None:
        """Parse one received nng message (I/O thread)."""
        pos, end = 0, mv.nbytes
        handler = self._handler
        while pos < end and not self._closed:
            if self._fill is not None:  # the rest of a chunked message
                frames, targets = self._fill
                while targets and pos < end:
                    k = min(targets[0].nbytes, end - pos)
                    targets[0][:k] = mv[pos : pos + k]
                    pos += k
                    consume(targets, k)
                if not targets:
                    self._fill = None
                    handler.on_message(self, frames)
                continue
            if self._hbuf is not None:  # a header cut by a chunk boundary
                take = min(self._hneed - len(self._hbuf), end - pos)
                self._hbuf += mv[pos : pos + take]
                pos += take
                if len(self._hbuf) < self._hneed:
                    return
                if self._hneed == 4:
                    (count,) = COUNT.unpack(self._hbuf)
                    if not self._check_count(count):
                        return
                    self._hneed = 4 + 8 * count
                    if count:
                        continue
                sizes = struct.unpack_from(f"!{(self._hneed - 4) // 8}Q", self._hbuf, 4)
                self._hbuf = None
                if self._check_total(sizes):
                    self._start_fill(list(sizes))
                continue
            if end - pos < 4:
                self._hbuf, self._hneed = bytearray(mv[pos:end]), 4
                return
            (count,) = COUNT.unpack_from(mv, pos)
            if not self._check_count(count):
                return
            hlen = 4 + 8 * count
            if end - pos < hlen:
                self._hbuf, self._hneed = bytearray(mv[pos:end]), hlen
                return
            sizes = struct.unpack_from(f"!{count}Q", mv, pos + 4)
            if not self._check_total(sizes):
                return
            start = pos + hlen
            if end - start >= sum(sizes):  # whole in this nng message: views, no copy
                out = []
                for n in sizes:
                    out.append(mv[start : start + n])
                    start += n
                pos = start
                handler.on_message(self, out)
                continue
            pos = start
            self._start_fill(list(sizes))

    def _start_fill(self, sizes: list[int]) -> None:
        frames, targets = receive_buffers(sizes)
        if targets:
            self._fill = (frames, targets)
        else:
            self._handler.on_message(self, frames)
