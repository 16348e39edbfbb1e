"""Dialing: one DEALER socket (and its monitor) per connection.

A dial fails at once when nobody listens (libzmq reports ``EVENT_CONNECT_RETRIED``), except
into a full Unix-socket backlog: there ``connect`` fails with ``EAGAIN`` (a listener busy
with a burst of connections, or stopped), which libzmq reports the same way. A dial over
``ipc`` that sees the retry probes the address once (:func:`backlog_full`) and, if the
backlog is what refused it, waits for libzmq's own retries (every ``ZMQ_RECONNECT_IVL``,
100 ms) within its timeout. Over TCP a full backlog drops the SYN, which the kernel resends:
no retry event comes.
"""

from __future__ import annotations

import errno
import socket
import threading

import zmq
from zmq.utils.monitor import parse_monitor_message

from tetrarch.plugins import Connection, ConnectionHandler, HandshakeRefused, TransportError

from ._conn import CLOSE, OPEN, ZmqConnection, split
from ._loop import BATCH, PER_LOCK, ZmqLoop, configure_socket, readable
from ._zap import HANDSHAKE_FAILED, secure_client

__all__ = ["dial"]

_DIAL_EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
for _event in HANDSHAKE_FAILED:
    _DIAL_EVENTS |= _event


class _Dial:
    """A DEALER from ``connect`` until it is open (then :meth:`read` serves it)."""

    def __init__(self, loop: ZmqLoop, address: str, native: str, handler: ConnectionHandler) -> None:
        self.loop = loop
        self.address = address
        self.native = native
        self.handler = handler
        self.conn: ZmqConnection | None = None
        self.phase = "dialing"  # -> "accepted" (OPEN came back) -> "open" (on_open ran), or "failed"
        self.error = ""
        self.lost = False  # the peer vanished between OPEN and on_open
        self.backlogged = False  # a connect found the listener's backlog full (libzmq retries)
        self.refused = False  # the listener refused us in zmq's handshake (another key)
        self.done = threading.Event()

    # -- I/O thread --------------------------------------------------------------
    def start(self) -> None:
        sock = self.loop.ctx.socket(zmq.DEALER)
        configure_socket(sock)
        if self.loop.password is not None:
            secure_client(sock, self.loop.password)
        if "[" in self.native:
            sock.setsockopt(zmq.IPV6, 1)
        monitor = sock.get_monitor_socket(_DIAL_EVENTS)
        conn = ZmqConnection(self.loop, sock, self.handler, self.address, None)
        conn.monitor = monitor
        self.conn = conn
        self.loop.conns.add(conn)
        self.loop.watch(monitor, self.on_monitor)
        self.loop.watch(sock, self.read)
        try:
            sock.connect(self.native)
            sock.send_multipart([OPEN], flags=zmq.NOBLOCK)  # queued until the connection is up
        except zmq.ZMQError as exc:
            self.fail(f"{exc}")

    def fail(self, why: str) -> None:
        if self.phase in ("dialing", "accepted"):
            self.phase = "failed"
            self.error = why
            assert self.conn is not None
            self.conn.mark_closed()
            self.conn.close_reported = True  # on_open never ran: nobody to tell
            self.loop.close_dealer(self.conn, 0)
            self.done.set()

    def on_monitor(self) -> None:
        conn = self.conn
        assert conn is not None
        while conn.monitor is not None and readable(conn.monitor):
            event = parse_monitor_message(conn.monitor.recv_multipart())["event"]
            if event == zmq.EVENT_CONNECT_RETRIED and self.phase == "dialing":
                if backlog_full(self.native):
                    self.backlogged = True
                else:
                    self.fail("nobody listens there (connection refused)")
            elif event in HANDSHAKE_FAILED and self.phase == "dialing":
                self.refused = True
                self.fail("the listener refused this process in zmq's handshake: it belongs to another "
                          "allocation (another transport key), or one of the two has no key")
            elif event == zmq.EVENT_DISCONNECTED:
                if self.phase == "dialing":
                    self.refused = True
                    self.fail("the listener hung up during the zmq handshake (a wrong key, or a "
                              "listener at its connection limit: see its log)")
                elif self.phase == "accepted":
                    self.lost = True
                elif self.phase == "open":
                    self.read()  # a CLOSE sent before the hang-up makes it orderly
                    self.loop.drop(conn, TransportError(f"connection to {self.address} was lost"))
                return

    def read(self) -> bool:
        conn = self.conn
        assert conn is not None
        read = 0
        while read < BATCH:
            if conn.close_reported or self.phase in ("accepted", "failed"):
                return False  # before on_open ran, messages wait in zmq (activate reads them)
            if self.phase == "dialing":  # one message: the listener's answer decides what follows
                frames = self.loop.recv(conn.sock)
                if frames is not None:
                    self._answer(*split(frames, 0))
                return False
            batch = self.loop.recv_some(conn.sock, PER_LOCK)
            for frames in batch:
                if conn.close_reported:
                    return False  # closed by one of these messages: the rest are not read
                read += 1
                tag, body = split(frames, 0)
                if tag == CLOSE:
                    self.loop.drop(conn, None)
                elif not conn.receive(tag, body):
                    self.loop.drop(conn, TransportError(f"peer {self.address} broke the zmq transport's protocol"))
            if len(batch) < PER_LOCK:
                return False
        return True  # a full batch: more may wait

    def _answer(self, tag: bytes, body: list) -> None:
        """The listener's answer to OPEN."""
        if tag == OPEN and not body:
            self.phase = "accepted"
        elif tag == CLOSE:
            self.fail("the listener is closed")
        else:
            self.fail("the peer is no tetrarch zmq listener")
        self.done.set()

    def activate(self) -> None:
        """``on_open`` ran: start delivering (I/O thread)."""
        conn = self.conn
        assert conn is not None
        if self.phase != "accepted" or conn.close_reported:
            return
        self.phase = "open"
        self.read()
        if self.lost:
            self.loop.drop(conn, TransportError(f"connection to {self.address} was lost"))


def backlog_full(native: str) -> bool:
    """Whether the Unix socket at ``native`` (``ipc://PATH``, ``@`` for the abstract namespace)
    refuses connections because its backlog is full (``EAGAIN``). False for anything else: no
    listener, another scheme, or a connect that went through (the probe closes it at once)."""
    if not native.startswith("ipc://"):
        return False
    path = native[len("ipc://"):]
    where = "\0" + path[1:] if path.startswith("@") else path
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        try:
            probe.connect(where)
        except BlockingIOError as exc:
            return exc.errno == errno.EAGAIN
        except OSError:
            return False
    return False


def dial(loop: ZmqLoop, address: str, native: str, handler: ConnectionHandler, timeout: float) -> Connection:
    """Connect a DEALER to ``native`` and wait for the listener's OPEN (``address`` for messages).

    Raises:
        HandshakeRefused: the listener refused this process in zmq's handshake (another key).
        TransportError: nobody listens there, the peer is no zmq listener of ours, or
            ``timeout`` passed.
    """
    attempt = _Dial(loop, address, native, handler)
    loop.queue.call(attempt.start)
    if not attempt.done.wait(timeout):
        gave_up = threading.Event()

        def give_up() -> None:
            full = " (the listener's backlog was full: it is flooded with connections, or stopped)"
            attempt.fail(f"no answer within {timeout:g} s{full if attempt.backlogged else ''}")
            gave_up.set()

        loop.queue.call(give_up)
        gave_up.wait(10)
    if attempt.phase != "accepted":
        error = HandshakeRefused if attempt.refused and attempt.phase == "failed" else TransportError
        raise error(f"cannot connect to {address}: {attempt.error or 'no answer'}")
    conn = attempt.conn
    assert conn is not None
    handler.on_open(conn)
    loop.queue.call(attempt.activate)
    return conn
