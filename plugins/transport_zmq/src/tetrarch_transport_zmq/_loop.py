"""The zmq transport's I/O loop: the context, the epoll set, and who reads the sockets.

zmq sockets are not thread safe; each is used by one thread at a time, behind its lock
(:meth:`ZmqLoop.lock_of`). Reading happens in the loop: on its own thread, or on a
thread that waits for a reply and reads meanwhile (:class:`tetrarch.plugins.LeaderLoop`).
Other threads post work through the loop's :class:`tetrarch.plugins.CallQueue` (an
eventfd in the same ``zmq.Poller``).
"""

from __future__ import annotations

import logging
import math
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq
import zmq.backend

from tetrarch.plugins import LeaderLoop, helper_thread_policy

from ._conn import CHUNK, CLOSE, ZmqConnection
from ._zap import ZapHandler

__all__ = ["BATCH", "PER_LOCK", "ZmqLoop", "configure_socket", "readable"]

_log = logging.getLogger("tetrarch.transport")

#: ZMTP heartbeats: a ping each second; a peer silent for HEARTBEAT_TIMEOUT_MS is dropped.
#: The timeout is longer than TETRARCH_FROZEN_TIMEOUT's default (8 s) on purpose: a
#: stopped proc is the kernel's to declare frozen. A dead process is noticed at once
#: anyway (its OS closes the socket: the monitor reports DISCONNECTED).
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 30_000
#: Messages (at most _conn.MESSAGE_BYTES each) libzmq queues per peer before the I/O thread reads them.
#: 32 let a 128 MiB result raise the caller's peak RSS to 1.51x its size once in a loaded suite.
RCV_HWM = 16
#: How long an orderly close waits for its last messages (and CLOSE) to leave.
CLOSE_LINGER_MS = 1000
#: Messages a reader takes from one socket before the loop's other sockets get a turn.
BATCH = 256
#: Messages read per hold of a socket's lock (its senders wait for it meanwhile).
PER_LOCK = 32
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


#: ``Socket.get`` of pyzmq's backend (the class ``zmq.Socket`` extends), without the sugar's
#: Python wrapper around it (1.6 against 1.9 us here; both look the option up as an enum).
_get = zmq.backend.Socket.get


def readable(sock: zmq.Socket[Any]) -> bool:
    """Whether ``sock`` has a message waiting: ``sock.poll(0)`` without the Poller it builds
    per call (a listener looks at its monitor on every read)."""
    return bool(_get(sock, _EVENTS) & _POLLIN)  # type: ignore[operator]  # an int for ZMQ_EVENTS


def configure_socket(sock: zmq.Socket[Any]) -> None:
    """Options every socket of the transport gets."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)  # our own queue (MAX_QUEUED per connection) is the bound
    # What libzmq may hold for one peer before the I/O thread reads it: past this, it stops
    # reading that peer's socket (back-pressure through the kernel to the sender). Unbounded,
    # a large message whose 1 MiB pieces arrived faster than the I/O thread copied them sat
    # in libzmq next to the buffers they were copied into (a 128 MiB argument raised a busy
    # receiver's peak memory by 1.6x its size).
    sock.setsockopt(zmq.RCVHWM, RCV_HWM)
    sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
    sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    # No zmq frame of ours is bigger (large messages go in pieces): libzmq drops a peer,
    # authenticated or not, that announces a bigger one before allocating it. It bounds the
    # commands of libzmq's own handshake too: what a stranger's HELLO may cost (_gate).
    sock.setsockopt(zmq.MAXMSGSIZE, CHUNK)


class ZmqLoop(LeaderLoop):
    """Owns the zmq context, the epoll set and the thread that waits on it (or a thread waiting
    for a reply reads for it meanwhile: :class:`tetrarch.plugins.LeaderLoop`)."""

    def __init__(self, name: str, password: bytes | None = None) -> None:
        super().__init__(name)
        #: The PLAIN password of the allocation's key (``_zap``), or None: no zmq-level gate.
        self.password = password
        self.ctx: zmq.Context[Any] = zmq.Context(io_threads=1)
        policy = helper_thread_policy()  # libzmq's threads apply it when they start (first socket)
        if policy is not None:
            self.ctx.set(zmq.THREAD_SCHED_POLICY, policy)
        # Every descriptor the loop waits on (the wake-up eventfd, each socket's ZMQ_FD) is a plain
        # one, so an epoll set serves: what the loop waits on and what a standby watches
        # (readiness_fd). zmq.Poller polled them all per wait and built its answer in Python.
        self._epoll = select.epoll()
        self._epoll.register(self.queue.fileno(), select.EPOLLIN)
        self._locks: dict[Any, threading.RLock] = {}  # see lock_of
        self.readers: dict[int, Callable[[], bool | None]] = {}  # by the socket's ZMQ_FD
        self.fds: dict[Any, int] = {}
        self.ready: dict[int, Callable[[], bool | None]] = {}  # readers to run without waiting
        self.retry: set[ZmqConnection] = set()  # connections whose sends zmq pushed back
        self.conns: set[ZmqConnection] = set()  # dialed connections (listeners keep their own)
        self.listeners: set[Any] = set()
        #: When each listener's gate has its next deadline (``time.monotonic``): set_due.
        self.timed: dict[Any, float] = {}
        self._start()
        if password is not None:  # posted first: it is bound before any listener (posted later)
            self.queue.call(ZapHandler(self, password).start)

    def lock_of(self, sock: Any) -> threading.RLock:
        """The lock held around every call on data socket ``sock`` (send, recv, close), by whichever
        thread makes it; never while calling out (handlers). zmq sockets are not thread safe, but
        one used by one thread at a time, behind a lock, is. One lock per socket: a connection's
        senders never wait for the I/O thread reading another socket (one lock for all made the
        callers, the flusher and the I/O thread trade it, and the GIL, once per message)."""
        lock = self._locks.get(sock)
        if lock is None:
            lock = self._locks.setdefault(sock, threading.RLock())
        return lock

    def close_socket(self, sock: Any, linger: int = 0) -> None:
        """Close ``sock`` under its lock and forget the lock (I/O thread)."""
        with self.lock_of(sock):
            if not sock.closed:
                sock.close(linger)
        self._locks.pop(sock, None)

    # -- registration (I/O thread) -------------------------------------------
    def watch(self, sock: Any, reader: Callable[[], bool | None]) -> None:
        """Run ``reader`` when ``sock`` may be readable; it returns True when it left messages to read.

        The loop polls the socket's ``ZMQ_FD`` as a plain descriptor (so it never touches
        the socket while another thread sends on it); that descriptor only says "look
        again", so the reader runs once now and after every send (:meth:`after_send`).
        """
        fd = sock.getsockopt(zmq.FD)
        self.fds[sock] = fd
        self.readers[fd] = reader
        self.ready[fd] = reader
        self._epoll.register(fd, select.EPOLLIN)

    def unwatch(self, sock: Any) -> None:
        fd = self.fds.pop(sock, None)
        if fd is not None:
            self.readers.pop(fd, None)
            self.ready.pop(fd, None)
            try:
                self._epoll.unregister(fd)
            except OSError:
                pass

    def after_send(self, sock: Any) -> None:
        """A send (under :attr:`lock`) may have consumed the wake-up of a message that arrived: look."""
        if readable(sock):
            if self.queue.in_loop():
                self._mark(sock)
            else:
                self.queue.call(lambda: self._mark(sock))

    def _mark(self, sock: Any) -> None:
        fd = self.fds.get(sock)
        if fd is not None:
            self.ready[fd] = self.readers[fd]

    def recv_some(self, sock: Any, limit: int) -> list[list[zmq.Frame]]:
        """Up to ``limit`` messages waiting on ``sock``, read under one hold of its lock (I/O
        thread): taking the lock per message made the readers and the senders of a busy
        connection trade it (and the GIL) once per message."""
        out: list[list[zmq.Frame]] = []
        with self.lock_of(sock):
            try:
                while len(out) < limit:
                    # recv_multipart, without its getsockopt(RCVMORE) and enum conversion per
                    # part (half the CPU of a small message's receipt): zmq hands a message out
                    # whole, so once its first part came the others are there.
                    frame = sock.recv(_NOBLOCK, copy=False)
                    parts = [frame]
                    while frame.more:
                        frame = sock.recv(_NOBLOCK, copy=False)
                        parts.append(frame)
                    out.append(parts)
                    if len(out) == 1 and not readable(sock):
                        break  # the usual lone message: no failed recv (a zmq.Again costs 5 us)
            except zmq.Again:
                pass
        return out

    def recv(self, sock: Any) -> list[zmq.Frame] | None:
        """One message from ``sock``, or None if none is waiting (I/O thread)."""
        found = self.recv_some(sock, 1)
        return found[0] if found else None

    # -- closing a connection (I/O thread) ------------------------------------
    def drop(self, conn: ZmqConnection, error: BaseException | None, *, tell_peer: bool = False) -> None:
        """Close ``conn`` for good and report it once; ``tell_peer``: an orderly local close."""
        if conn.close_reported:
            return
        pending = conn.mark_closed()
        sock = conn.sock
        # A listening side always says CLOSE (the ROUTER cannot hang up on one peer; the
        # peer's DEALER then disconnects), a dialing side on an orderly close only (else
        # closing its DEALER is the hang-up).
        if tell_peer or conn.route is not None:
            head = [conn.route] if conn.route is not None else []
            with self.lock_of(sock):
                try:
                    if not sock.closed:
                        for msg in pending if tell_peer else ():  # sent before close(): still goes out, in order
                            sock.send_multipart(msg, flags=zmq.NOBLOCK, copy=False)
                        sock.send_multipart([*head, CLOSE], flags=zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass  # the peer is gone already
                if conn.route is not None and not sock.closed:
                    # The listener's ROUTER, which its other peers share: the send took the
                    # wake-up of whatever arrived meanwhile (another peer's OPEN, say), and a
                    # reader that is done with its batch would leave that unread for good.
                    self.after_send(sock)
        if conn.route is None:
            self.close_dealer(conn, CLOSE_LINGER_MS if tell_peer else 0)
        elif conn.listener is not None:
            conn.listener.forget(conn)
        conn.close_reported = True
        try:
            conn.handler.on_close(conn, error)
        except Exception:  # noqa: BLE001 - a faulty handler must not kill the I/O thread
            _log.exception("on_close failed for %s", conn.peer)

    def close_dealer(self, conn: ZmqConnection, linger: int) -> None:
        self.conns.discard(conn)
        self.unwatch(conn.sock)
        if conn.monitor is not None:
            self.unwatch(conn.monitor)
            with self.lock_of(conn.sock):
                if not conn.sock.closed:
                    conn.sock.disable_monitor()
            conn.monitor.close(0)
            conn.monitor = None
        self.close_socket(conn.sock, linger)

    def set_due(self, listener: Any, due: float) -> None:
        """Call ``listener.expire()`` in the loop at ``due`` (``time.monotonic``; inf: never).

        While one is pending the I/O thread reads (a standby only wakes on a readable
        descriptor), so it is woken when the first is set. I/O thread.
        """
        if due == math.inf:
            self.timed.pop(listener, None)
            return
        first = not self.timed
        self.timed[listener] = due
        if first:
            self._unpark()

    def pushed_back(self, conn: ZmqConnection) -> None:
        """zmq pushed back ``conn``'s sends: retried every 2 ms by the I/O thread (a standby
        cannot wait with a timeout), which is woken for it."""
        self.retry.add(conn)
        self._unpark()

    # -- the loop (LeaderLoop) ---------------------------------------------------
    def readiness_fd(self) -> int | None:
        return self._epoll.fileno()

    def _needs_thread(self) -> bool:
        return bool(self.retry or self.timed)

    def lead_ready(self) -> None:
        super().lead_ready()
        if self.ready:  # readers left messages (or were just registered): come back next turn
            self.queue.wake()

    def _has_work(self, events: list) -> bool:
        return bool(events or self.ready or self.retry)

    def _wait(self, timeout: float | None) -> list:
        wait = 0.0 if self.ready else 0.002 if self.retry else None
        if self.timed:
            due = max(0.0, min(self.timed.values()) - time.monotonic())
            wait = due if wait is None else min(wait, due)
        if timeout is not None:
            wait = timeout if wait is None else min(wait, timeout)
        return self._epoll.poll(-1 if wait is None else max(wait, 0.0))  # seconds, rounded up to ms

    def _dispatch(self, events: list) -> None:
        wake = self.queue.fileno()
        for fd, _ in events:
            if fd == wake:
                self.queue.run_pending()
            elif fd in self.readers:
                self.ready[fd] = self.readers[fd]
        ready, self.ready = self.ready, {}
        for fd, reader in ready.items():
            if fd not in self.readers:
                continue  # unwatched by an earlier reader
            try:
                if reader():
                    self.ready[fd] = reader  # it left messages for the next turn
            except Exception:  # noqa: BLE001 - one faulty handler must not end the loop
                _log.exception("zmq transport: a reader failed")
        for conn in list(self.retry):
            conn.flush()
        if self.timed:
            now = time.monotonic()
            for listener, due in list(self.timed.items()):
                if due <= now:
                    try:
                        listener.expire()
                    except Exception:  # noqa: BLE001 - the loop goes on
                        _log.exception("zmq transport: a listener's deadlines failed")

    def stop(self) -> None:
        """Close every connection and listener, then end the thread (returns once it ended)."""
        def do() -> None:
            for conn in list(self.conns):
                self.drop(conn, None, tell_peer=True)
            for listener in list(self.listeners):
                listener.shutdown()
            self._stop_now()

        self.queue.call(do)
        self._join(10)

    def _close(self) -> None:
        for sock in list(self.fds):
            self.close_socket(sock)
        self.fds.clear()
        self.readers.clear()
        self._epoll.close()
        self.ctx.destroy(linger=0)
