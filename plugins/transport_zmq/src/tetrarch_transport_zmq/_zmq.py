"""The zmq transport: ``zmq+tcp://host:port`` and ``zmq+ipc://path`` over pyzmq.

Mapping zmq onto connections (the kernel authenticates, orders and supervises per
connection):

* A listener is one ROUTER socket (``ROUTER_MANDATORY``: a send to a vanished peer
  fails instead of vanishing). Each ``connect`` makes its own DEALER socket, so one
  connection is one DEALER on the dialing side and one routing identity on the
  listening side. The DEALER's first message is ``OPEN``; the listener's ``on_open``
  runs when it arrives, and the listener answers ``OPEN``, on which ``connect`` returns.
* Closes: an orderly ``close`` sends ``CLOSE``; a peer that dies is noticed through
  socket monitors (``DISCONNECTED``; on the listening side the event's descriptor is
  matched to the identity that first spoke from it, zmq's ``SRCFD``) and ZMTP heartbeats.
* Limits: every socket has ``ZMQ_MAXMSGSIZE`` = ``_conn.CHUNK`` (64 KiB): no zmq frame of
  ours is bigger (large messages go as a header and pieces, see ``_conn``), and libzmq
  drops any peer, authenticated or not, that announces a bigger frame before it
  allocates it. ``max_message_size`` is checked per connection: on a large message's
  header before anything is allocated, on a small message (at most 1 MiB, in frames of at
  most 64 KiB) once zmq has it. What libzmq does not bound by itself: a peer that never ends a multipart message
  (MORE on every frame) makes it buffer every frame until the peer hangs up; zmq has no
  option for the frame count. So only the allocation's processes get that far: given the
  allocation's key (``Transport.use_key``, as the kernel always does), every ROUTER is a
  ZMTP PLAIN server behind a ZAP handler and every DEALER presents the key (``_zap``);
  libzmq refuses anyone else in its handshake, before it reads a frame.
* Strangers: until a peer's OPEN arrives, the listener holds it to the kernel's
  ``PreAuthLimits`` (``Transport.limit_unauthenticated``, before ``listen``): a deadline,
  a cap on connections waiting (oldest closed first) and on connections in all (new ones
  refused, logged), 86-88 KiB of memory each at most (``_gate``).
* Threads: any thread sends on a connection directly when nothing is queued on it (under
  the loop's lock); the I/O thread reads, and sends what was pushed back.
* Exit: every transport closes before pyzmq's own atexit runs (:func:`_close_at_exit`):
  frames sent without a copy must not outlive the memory they point to.
"""

from __future__ import annotations

import atexit
import itertools
import math
import os
import struct
import time
import weakref
from typing import Any

import zmq
import zmq.utils.garbage  # registers pyzmq's atexit before ours (see _close_at_exit)

from tetrarch.plugins import (
    Connection,
    ConnectionHandler,
    Listener,
    PreAuthLimits,
    QualifiedAddress,
    Transport,
    TransportError,
    advertised_host,
    fresh_ipc_name,
    parse_qualified,
)

from ._conn import CLOSE, OPEN, ZmqConnection, split
from ._dial import dial
from ._gate import Gate
from ._loop import BATCH, PER_LOCK, ZmqLoop, configure_socket, readable
from ._zap import password_of, secure_server

__all__ = ["ZmqTransport"]

_monitors = itertools.count()
_ACCEPTED = int(zmq.EVENT_ACCEPTED)
_DISCONNECTED = int(zmq.EVENT_DISCONNECTED)
_EVENT = struct.Struct("=HI")


def _event(frames: list[bytes]) -> tuple[int, int]:
    """A monitor message's event and value (``zmq.utils.monitor.parse_monitor_message``, without
    the dict and the enum it builds per event: a flood of accepts is read one event at a time)."""
    return _EVENT.unpack_from(frames[0])

#: What a listener's monitor reports: accepts and ends of connections (``_gate``).
_LISTEN_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED


def monitor_of(sock: zmq.Socket[Any], events: int) -> zmq.Socket[Any]:
    """A PAIR socket that receives ``sock``'s monitor ``events`` (``Socket.get_monitor_socket``,
    but with no high-water mark on our end).

    libzmq's I/O thread sends each event with a blocking send, holding the socket's monitor
    lock: at a full pipe (a flood of accepts read late) it would stop every connection's I/O
    until we read, and closing the socket meanwhile would wait on that lock for good.
    """
    addr = f"inproc://monitor.tetrarch-{id(sock):x}-{next(_monitors)}"
    sock.monitor(addr, events)
    pair = sock.context.socket(zmq.PAIR)
    pair.setsockopt(zmq.RCVHWM, 0)
    pair.connect(addr)
    return pair


class _ZmqListener(Listener):
    def __init__(self, loop: ZmqLoop, sock: zmq.Socket[Any], monitor: zmq.Socket[Any], address: str,
                 handler: ConnectionHandler, path: str | None, limits: PreAuthLimits) -> None:
        self._loop = loop
        self._sock = sock
        self._address = address
        self._handler = handler
        self._path = path
        self._monitor = monitor
        self._gate = Gate(limits, address, lambda: len(loop.conns))
        self._accepts = False  # the gate learnt of accepts it has not enforced its limits on
        self._conns: dict[bytes, ZmqConnection] = {}
        self._by_fd: dict[int, ZmqConnection] = {}
        self._closed = False
        self._gone = False

    @property
    def address(self) -> str:
        return self._address

    def start(self) -> None:  # I/O thread
        self._loop.listeners.add(self)
        self._loop.watch(self._monitor, self.on_readable)
        self._loop.watch(self._sock, self.on_readable)

    # -- I/O thread ------------------------------------------------------------
    def on_readable(self) -> bool:
        # Disconnects first, then every message that arrived before them (a CLOSE makes
        # a close orderly); a descriptor reused by a new peer is told apart on its OPEN.
        gone: set[int] = set()
        self._events(gone)
        read = 0
        more = False
        while not self._gone:
            if read >= BATCH and not gone:
                more = True  # the others get a turn
                break
            batch = self._loop.recv_some(self._sock, PER_LOCK)
            for frames in batch:
                if self._gone:
                    break  # shut down by one of these messages' handlers: the rest are not read
                read += 1
                self._message(frames, gone)
            if len(batch) < PER_LOCK:
                break
        if not self._accepts:  # the usual case: no accept to hold to the limits
            self._lost(gone)
        elif self._gated(gone) and not self._gone:
            # Reading the monitor took the wake-up of messages that came meanwhile (a handler
            # ran long, say): their reading would otherwise wait for the next event.
            more = more or readable(self._sock)
        return more

    def expire(self) -> None:
        """A deadline of the gate fell due (I/O thread: the loop's timer)."""
        if self._gated(set()) and not self._gone:
            self._loop.after_send(self._sock)  # read what came meanwhile (see on_readable)

    def _gated(self, gone: set[int]) -> int:
        """Read the monitor to the end, let the gate close what it must, then report the lost;
        return how many events it read."""
        if self._gone:
            return 0
        read = self._events(gone)
        self._accepts = False
        self._gate.enforce(time.monotonic())
        self._loop.set_due(self, self._gate.due())
        self._lost(gone)
        return read

    def _lost(self, gone: set[int]) -> None:
        """Report the connections on the descriptors in ``gone`` lost."""
        for fd in gone:
            conn = self._by_fd.get(fd)
            if conn is not None:
                self._loop.drop(conn, TransportError(f"connection from {conn.peer} was lost"))

    def _events(self, gone: set[int]) -> int:
        """Read the monitor until it is empty (the number of events read): the gate learns of
        accepts and ends, in order, and the descriptors of the ends are added to ``gone``."""
        gate = self._gate
        read = 0
        while readable(self._monitor):
            read += 1
            event, value = _event(self._monitor.recv_multipart())
            if event == _DISCONNECTED:
                gone.add(value)
                gate.disconnected(value)
            elif event == _ACCEPTED:
                gate.accepted(value, time.monotonic())
                self._accepts = True
        return read

    def _message(self, frames: list[zmq.Frame], gone: set[int]) -> None:
        if len(frames) < 2:
            return  # not from a DEALER of ours: nothing to attribute it to
        route = frames[0].bytes
        tag, body = split(frames, 1)
        conn = self._conns.get(route)
        if conn is not None:
            if tag == CLOSE:
                self._loop.drop(conn, None)
            elif not conn.receive(tag, body):
                self._loop.drop(conn, TransportError(f"peer {conn.peer} broke the zmq transport's protocol"))
            return
        if tag != OPEN or body:
            return  # an identity we closed, or a peer that never opened: dropped unread
        if self._closed:
            self._send_now([route, CLOSE])
            return
        fd = int(frames[1].get(zmq.SRCFD))
        # A disconnect on this descriptor that libzmq reported before it accepted this peer
        # is an earlier peer's: read them all now, or one read later (the thread was busy,
        # say, with this batch) would close this connection instead (libzmq reports a
        # disconnect before it closes the descriptor, which it must close before reusing it).
        self._events(gone)
        ticket = self._gate.opened(fd)
        if ticket is None:
            # Closed by the gate (past a limit), or gone (its end was read after its accept),
            # before its OPEN was read: dropped unread. A disconnect in ``gone`` is then this
            # peer's or an earlier one's, whose connection (if any) is reported lost.
            return
        gone.discard(fd)
        old = self._by_fd.get(fd)
        if old is not None:  # its descriptor now serves someone else: the old peer is gone
            self._loop.drop(old, TransportError(f"connection from {old.peer} was lost"))
        conn = ZmqConnection(self._loop, self._sock, self._handler, f"{self._address} (peer {route.hex()})", route)
        conn.listener = self
        conn.fd = fd
        conn.ticket = ticket
        self._conns[route] = conn
        self._by_fd[fd] = conn
        self._send_now([route, OPEN])
        try:
            self._handler.on_open(conn)
        except Exception as exc:  # noqa: BLE001 - a faulty handler closes this connection only
            self._loop.drop(conn, exc, tell_peer=True)

    def _send_now(self, msg: list[bytes]) -> None:
        with self._loop.lock_of(self._sock):
            try:
                self._sock.send_multipart(msg, flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            self._loop.after_send(self._sock)

    def forget(self, conn: ZmqConnection) -> None:
        if conn.route is not None and self._conns.get(conn.route) is conn:
            del self._conns[conn.route]
        if self._by_fd.get(conn.fd) is conn:
            del self._by_fd[conn.fd]
        if conn.ticket is not None:  # closed by us: the gate closes it if the peer stays
            self._gate.closed(conn.ticket, time.monotonic())
            self._loop.set_due(self, self._gate.due())
        if self._closed and not self._conns:
            self.shutdown()

    # -- closing -------------------------------------------------------------
    def close(self) -> None:
        """Stop accepting: later dialers are told CLOSE; the socket goes with the last connection."""
        if self._closed:
            return
        self._closed = True

        def do() -> None:
            if not self._conns:
                self.shutdown()

        self._loop.queue.call(do)

    def shutdown(self) -> None:
        """Close the ROUTER (and with it every connection left). I/O thread; idempotent."""
        if self._gone:
            return
        self._gone = True
        self._closed = True
        for conn in list(self._conns.values()):
            self._loop.drop(conn, None, tell_peer=True)
        self._loop.listeners.discard(self)
        self._loop.set_due(self, math.inf)
        self._loop.unwatch(self._sock)
        self._loop.unwatch(self._monitor)
        with self._loop.lock_of(self._sock):
            self._sock.disable_monitor()
            self._monitor.close(0)
        self._loop.close_socket(self._sock)
        if self._path:
            try:
                os.unlink(self._path)
            except OSError:
                pass


class ZmqTransport(Transport):
    """Transport over ZeroMQ (pyzmq): one ROUTER per listener, one DEALER per dialed connection."""

    name = "zmq"
    schemes = ("tcp", "ipc")  # bare, as its TransportSpec's: addresses read zmq+tcp:// and zmq+ipc://

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._io: ZmqLoop | None = None
        self._password: bytes | None = None
        _live.add(self)

    def _loop(self) -> ZmqLoop:
        with self._lock:
            if self._io is None:
                if _exiting:
                    raise TransportError("zmq is shut down (this process is exiting)")
                self._io = ZmqLoop(self.name, self._password)
            return self._io

    def use_key(self, key: bytes) -> None:
        """Admit only peers that present ``key`` in zmq's own handshake (``_zap``).

        Raises:
            TransportError: the transport listened or dialed already (the key comes first).
        """
        with self._lock:
            if self._io is not None:
                raise TransportError("zmq transport: use_key() must come before its first listen or connect")
            self._password = password_of(key)

    def limit_unauthenticated(self, limits: PreAuthLimits) -> None:
        """Hold every later listener's connections to ``limits`` until their OPEN (``_gate``):
        ``limits.timeout`` is also libzmq's handshake deadline (``ZMQ_HANDSHAKE_IVL``); a
        listener made before keeps the limits it was made with. Never raises."""
        self.preauth_limits = limits

    def leader_loop(self) -> ZmqLoop:
        return self._loop()

    def listen(self, address: str, handler: ConnectionHandler) -> Listener:
        """Listen at ``address``: ``zmq+tcp://`` or ``zmq+ipc://``, or the same without the
        qualifier (``tcp://h:1``, as the kernel passes an address it was told to listen at).

        Raises:
            ValueError: the address is of another form (the message gives the expected ones).
            TransportError: it cannot be bound.
        """
        if isinstance(address, str) and address.split("://", 1)[0] in self.schemes:
            address = f"{self.name}+{address}"
        where = parse_qualified(address, self.name)
        loop = self._loop()
        box: list[Any] = []

        def bind() -> None:
            try:
                box.append(self._bind(loop, where, handler))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                box.append(exc)

        _on_loop(loop, bind)
        result = box[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _bind(self, loop: ZmqLoop, where: QualifiedAddress, handler: ConnectionHandler) -> _ZmqListener:
        sock = loop.ctx.socket(zmq.ROUTER)
        configure_socket(sock)
        if loop.password is not None:
            secure_server(sock)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        limits = self.preauth_limits
        # libzmq ends a handshake (greeting, HELLO, ZAP) that takes longer (``_gate``).
        sock.setsockopt(zmq.HANDSHAKE_IVL, max(1, math.ceil(limits.timeout * 1000)))
        monitor = monitor_of(sock, _LISTEN_EVENTS)  # before the bind: no accept goes unreported
        native = where.native()
        if where.scheme == "tcp" and where.port == 0:
            native = native.rsplit(":", 1)[0] + ":*"
        try:
            sock.bind(native)
        except zmq.ZMQError as exc:
            sock.disable_monitor()
            monitor.close(0)
            sock.close(0)
            raise TransportError(f"cannot listen on zmq+{native}: {exc}") from exc
        path = None
        if where.scheme == "tcp":
            bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            port = int(bound.rsplit(":", 1)[1])
            host = advertised_host(where.host)
            real = f"zmq+tcp://[{host}]:{port}" if ":" in host else f"zmq+tcp://{host}:{port}"
        else:
            real = f"zmq+ipc://{where.path}"
            path = None if where.path.startswith("@") else where.path
        listener = _ZmqListener(loop, sock, monitor, real, handler, path, limits)
        listener.start()
        return listener

    def connect(self, address: str, handler: ConnectionHandler, timeout: float = 10.0) -> Connection:
        where = parse_qualified(address, self.name)
        return dial(self._loop(), address, where.native(), handler, timeout)

    def default_address(self, *, spans_hosts: bool) -> str:
        if spans_hosts:
            return "zmq+tcp://0.0.0.0:0"
        return f"zmq+ipc://{fresh_ipc_name(self.name)}"

    def close(self) -> None:
        with self._lock:
            io, self._io = self._io, None
        if io is not None:
            io.stop()


def _on_loop(loop: ZmqLoop, fn: Any) -> None:
    """Run ``fn`` on the I/O thread and wait for it."""
    if loop.queue.in_loop():
        fn()
        return
    import threading

    done = threading.Event()

    def run() -> None:
        try:
            fn()
        finally:
            done.set()

    loop.queue.call(run)
    if not done.wait(30):
        raise TransportError("the zmq transport's I/O thread did not answer within 30 s")


#: Every transport of this process, closed at exit (:func:`_close_at_exit`).
_live: weakref.WeakSet[ZmqTransport] = weakref.WeakSet()
_exiting = False


@atexit.register  # after pyzmq's garbage collector registered its own (imported above): runs first
def _close_at_exit() -> None:
    """Close every transport, then keep pyzmq's atexit from stopping its garbage collector.

    That collector holds the Python objects whose memory libzmq sends without a copy (frames
    of 64 KiB and more) until libzmq is done with them. Its atexit drops them all and
    terminates its context. A proc that exited while its large replies were still queued
    (stopped right after a sibling died, say) had them written from freed memory: ``send``
    failed with EFAULT and libzmq aborted the process ("Bad address (src/tcp.cpp:227)").

    So, first, every transport closes: its sockets end (an orderly close lingers up to 1 s
    for its last messages) and its context terminates, after which libzmq holds no memory
    of ours. Terminating that context releases whatever was still queued, and pyzmq's own
    context termination then aborted about one exit in ten ("Assertion failed: ok
    (src/mailbox.cpp:72)"). So, second, the collector is left as it is: it is marked as
    another process's (the test pyzmq 27 makes after a fork), and its atexit then finds
    nothing to stop. Its thread is a daemon, and the process is ending. Dials after this
    raise TransportError.
    """
    global _exiting
    _exiting = True
    for transport in list(_live):
        try:
            transport.close()
        except Exception:  # noqa: BLE001 - exiting: close what can be closed
            pass
    collector = getattr(zmq.utils.garbage, "gc", None)
    if collector is not None and hasattr(collector, "pid"):
        collector.pid = -1
