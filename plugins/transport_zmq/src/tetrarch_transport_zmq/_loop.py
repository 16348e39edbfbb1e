"""The zmq transport's one I/O thread: every zmq socket of a transport lives and is used here.

zmq sockets are not thread safe, so other threads never touch them: ``send`` queues
the message on its connection and wakes this thread through a
:class:`tetrarch.plugins.CallQueue` (an eventfd in the same ``zmq.Poller``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import zmq

from tetrarch.plugins import CallQueue

from ._conn import CHUNK, CLOSE, ZmqConnection

__all__ = ["ZmqLoop", "configure_socket"]

_log = logging.getLogger("tetrarch.transport")

#: ZMTP heartbeats: a ping each second; a peer silent for HEARTBEAT_TIMEOUT_MS is dropped.
#: The timeout is longer than TETRARCH_FROZEN_TIMEOUT's default (8 s) on purpose: a
#: stopped proc is the kernel's to declare frozen. A dead process is noticed at once
#: anyway (its OS closes the socket: the monitor reports DISCONNECTED).
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 30_000
#: How long an orderly close waits for its last messages (and CLOSE) to leave.
CLOSE_LINGER_MS = 1000


def configure_socket(sock: zmq.Socket[Any]) -> None:
    """Options every socket of the transport gets."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)  # our own queue (MAX_QUEUED per connection) is the bound
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
    sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    # No zmq frame of ours is bigger (large messages go in pieces): libzmq drops a peer,
    # authenticated or not, that announces a bigger one before allocating it.
    sock.setsockopt(zmq.MAXMSGSIZE, CHUNK)


class ZmqLoop:
    """Owns the zmq context, the poller and the thread that runs them."""

    def __init__(self, name: str) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context(io_threads=1)
        self.queue = CallQueue()
        self.poller = zmq.Poller()
        self.poller.register(self.queue.fileno(), zmq.POLLIN)
        self.readers: dict[Any, Callable[[], None]] = {}
        self.retry: set[ZmqConnection] = set()  # connections whose sends zmq pushed back
        self.conns: set[ZmqConnection] = set()  # dialed connections (listeners keep their own)
        self.listeners: set[Any] = set()
        self._stopped = False
        self.thread = threading.Thread(target=self._run, name=f"tetrarch-io-{name}", daemon=True)
        self.thread.start()

    # -- registration (I/O thread) -------------------------------------------
    def watch(self, sock: Any, reader: Callable[[], None]) -> None:
        self.readers[sock] = reader
        self.poller.register(sock, zmq.POLLIN)

    def unwatch(self, sock: Any) -> None:
        if self.readers.pop(sock, None) is not None:
            self.poller.unregister(sock)

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
        if (tell_peer or conn.route is not None) and not sock.closed:
            head = [conn.route] if conn.route is not None else []
            try:
                for msg in pending if tell_peer else ():  # sent before close(): still goes out, in order
                    sock.send_multipart(msg, flags=zmq.NOBLOCK, copy=False)
                sock.send_multipart([*head, CLOSE], flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # the peer is gone already
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
            if not conn.sock.closed:
                conn.sock.disable_monitor()
            conn.monitor.close(0)
            conn.monitor = None
        if not conn.sock.closed:
            conn.sock.close(linger)

    # -- the loop ---------------------------------------------------------------
    def _run(self) -> None:
        self.queue.bind()
        wake = self.queue.fileno()
        try:
            while not self._stopped:
                events = self.poller.poll(2 if self.retry else None)
                for sock, _ in events:
                    if sock == wake:
                        self.queue.run_pending()
                        continue
                    reader = self.readers.get(sock)
                    if reader is None:
                        continue
                    try:
                        reader()
                    except Exception:  # noqa: BLE001 - one faulty handler must not end the loop
                        _log.exception("zmq transport: a reader failed")
                for conn in list(self.retry):
                    conn.flush()
        finally:
            self._shutdown()

    def stop(self) -> None:
        """Close every connection and listener, then end the thread (returns once it ended)."""
        def do() -> None:
            for conn in list(self.conns):
                self.drop(conn, None, tell_peer=True)
            for listener in list(self.listeners):
                listener.shutdown()
            self._stopped = True

        self.queue.call(do)
        if not self.queue.in_loop():
            self.thread.join(10)

    def _shutdown(self) -> None:
        for sock in list(self.readers):
            if isinstance(sock, zmq.Socket) and not sock.closed:
                sock.close(0)
        self.readers.clear()
        self.ctx.destroy(linger=0)
        self.queue.close()
