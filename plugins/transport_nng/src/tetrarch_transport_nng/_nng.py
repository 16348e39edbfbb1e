"""The nng transport (pynng): ``nng+tcp://host:port`` and ``nng+ipc:///path`` / ``nng+ipc://@name``.

nng hides connections behind sockets; the kernel needs them (per-connection
authentication, ordering and ``on_close``). Each :class:`~tetrarch.plugins.Connection`
is therefore one nng ``pair0`` socket holding exactly one pipe, on both sides, and this
plugin makes the stream under that pipe itself and hands it to nng (``_conn.hand_over``:
nng's ``socket://`` transport, nng 1.9+):

* Listening (``_listen.py``): a plain listening socket read by the transport's I/O loop;
  each accepted descriptor gets a fresh ``pair0`` socket, and the connection opens when
  nng has exchanged SP headers on it. Until then it holds a ticket of the transport's
  :class:`~._gate.Gate`, which holds that stage to the kernel's
  :class:`~tetrarch.plugins.PreAuthLimits` (:meth:`NngTransport.limit_unauthenticated`):
  closed past ``timeout``, the oldest closed past ``max_pending``, refused at ``accept``
  while open connections fill ``connection_limit()``.
* Dialing (:func:`_dial`): a plain ``connect`` (retried while a Unix listener's backlog
  is full: its ``connect`` does not wait for room as TCP's does), then a look (``MSG_PEEK``)
  at the 8 bytes nng's listener side sends first: a listener that refused the connection
  (at its limit, or closing) closes it instead, which fails the dial at once, and a peer
  that is not a ``pair0`` socket is named as such. Then the descriptor goes to the
  connection's ``pair0`` socket and the dial returns once nng added the pipe.
* The wire is nng's TCP framing over TCP and Unix sockets alike (the ``socket://``
  transport's); an nng ``ipc://`` peer (one more byte per message) cannot talk to it.
* Why not one polyamorous ``pair1`` socket per listener with per-pipe sends, which
  nng offers: its per-pipe send queue holds two messages and the socket *drops*
  whatever does not fit (``pair1_poly.c``: "we just discard the message" to avoid
  head-of-line blocking), so replies to a busy peer would vanish silently. ``bus0`` is
  best effort as well, and ``req0``/``rep0`` force lock-step. A ``pair0`` socket with one
  pipe gives a reliable, ordered, back-pressured stream per connection.
* Closing: pipe notifications (``add_post_pipe_remove_cb``) tell when the peer's pipe
  went away (a process that dies closes its sockets; the OS tells nng at once); the
  I/O thread then delivers what was queued and reports ``on_close``. TCP keepalive is
  on for silent host deaths. nng never redials: the ``socket://`` listener that took the
  descriptor makes no other pipe.
* Exit (``_exit.py``): every transport is closed before pynng's ``nng_fini``.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
import weakref

import pynng

from tetrarch.plugins import (
    Connection,
    ConnectionHandler,
    IoLoop,
    Listener,
    PreAuthLimits,
    QualifiedAddress,
    Transport,
    TransportError,
    fresh_ipc_name,
    parse_qualified,
)

from ._conn import PAIR0_HEADER, NngConnection, hand_over, pair_socket
from ._exit import EXIT_WAIT, exit_gate, live
from ._gate import Gate
from ._listen import NngListener

__all__ = ["NngTransport"]

#: Longest pause between two tries of a dial that found the listener's backlog full.
_BACKLOG_PAUSE_MAX = 0.05


def _connect_unix(where: QualifiedAddress, address: str, deadline: float, timeout: float) -> socket.socket:
    """A Unix socket connected to ``where``, trying again while the listener's backlog is full.

    Raises:
        TransportError: the backlog stayed full until ``deadline``.
        OSError: the connect failed otherwise (refused, no such file, ...).
    """
    sockaddr = "\0" + where.path[1:] if where.path.startswith("@") else where.path
    pause = 0.001
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)  # EAGAIN at once when the backlog is full, where blocking would wait unbounded
        try:
            s.connect(sockaddr)
            return s
        except BlockingIOError:
            s.close()
        except BaseException:
            s.close()
            raise
        left = deadline - time.monotonic()
        if left <= 0:
            raise TransportError(f"cannot connect to {address}: its listen backlog stayed full for {timeout:g} s")
        time.sleep(min(pause, left))  # back off while the listener drains its backlog (not synchronization)
        pause = min(2 * pause, _BACKLOG_PAUSE_MAX)


def _dial(where: QualifiedAddress, address: str, deadline: float, timeout: float) -> int:
    """A descriptor connected to the listener at ``where``, whose nng header arrived (and waits, unread).

    Raises:
        TransportError: refused, unreachable, backlog full, closed by the listener before its
            header (at its connection limit, or closing), no header before ``deadline``, a
            header that is not a ``pair0`` socket's, or the process is exiting.
    """
    try:
        if where.scheme == "tcp":
            s = socket.create_connection((where.host, where.port), timeout=max(0.001, deadline - time.monotonic()))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        else:
            s = _connect_unix(where, address, deadline, timeout)
    except OSError as exc:
        raise TransportError(f"cannot connect to {address}: {exc}") from exc
    with s, exit_gate.stopping(lambda: s.shutdown(socket.SHUT_RDWR)):
        try:
            s.settimeout(max(0.001, deadline - time.monotonic()))
            head = s.recv(len(PAIR0_HEADER), socket.MSG_PEEK | socket.MSG_WAITALL)
        except TimeoutError:
            raise TransportError(f"cannot connect to {address}: no answer within {timeout:g} s") from None
        except OSError as exc:
            if exc.errno not in (errno.ECONNRESET, errno.EPIPE):
                raise TransportError(f"cannot connect to {address}: {exc}") from exc
            head = b""  # reset: closed by the listener as well
        if exit_gate.is_shut:
            raise TransportError(f"cannot connect to {address}: nng is shut down (this process is exiting)")
        if len(head) < len(PAIR0_HEADER):
            raise TransportError(f"cannot connect to {address}: the listener closed the connection (it is at its "
                                 "connection limit, or closing)")
        if head != PAIR0_HEADER:
            raise TransportError(f"cannot connect to {address}: it is not a tetrarch nng listener of this version "
                                 f"(its SP header is {head!r}, a pair0 socket's is {PAIR0_HEADER!r})")
        s.setblocking(False)
        return s.detach()


class _Dialed(NngConnection):
    def __init__(self, loop: IoLoop, sock: pynng.Pair0, handler: ConnectionHandler, peer: str, gate: Gate) -> None:
        super().__init__(loop, sock, handler, peer)
        self._gate = gate
        #: Set once nng added the pipe, or the connection was closed before (the dial waits on it).
        self.added = threading.Event()
        self._close_reported = True  # nothing to report before on_open (see opening())
        sock.add_post_pipe_connect_cb(self._pipe_added)
        sock.add_post_pipe_remove_cb(self._pipe_removed)

    def _pipe_added(self, _pipe: pynng.Pipe) -> None:
        self.added.set()

    def _pipe_removed(self, _pipe: pynng.Pipe) -> None:
        self.pipe_alive = False
        self._loop.call(self.pipe_gone)

    def opening(self) -> None:
        """The dial succeeded: ``on_open`` comes next, so ``on_close`` will be reported."""
        self._close_reported = False
        self._gate.opened(self)

    def drop(self, error: BaseException | None) -> None:
        super().drop(error)
        self._gate.released(self)
        self.added.set()


class NngTransport(Transport):
    """tetrarch messages over nng (pynng): ``nng+tcp://`` and ``nng+ipc://`` addresses."""

    name = "nng"
    schemes = ("tcp", "ipc")

    def __init__(self) -> None:
        self._loop: IoLoop | None = None
        self._lock = threading.Lock()
        self._objects: weakref.WeakSet[NngConnection | NngListener] = weakref.WeakSet()
        #: Accepted connections waiting for their opening, and open ones (the kernel's bounds).
        self.gate = Gate(self.loop)
        live.add(self)

    def limit_unauthenticated(self, limits: PreAuthLimits) -> None:
        """Hold accepted connections until nng opens them to ``limits`` (see ``_gate``)."""
        super().limit_unauthenticated(limits)
        self.gate.limits = limits

    def loop(self) -> IoLoop:
        with self._lock:
            if self._loop is None:
                self._loop = IoLoop(self.name)
            return self._loop

    def leader_loop(self) -> IoLoop:
        return self.loop()

    def listen(self, address: str, handler: ConnectionHandler) -> Listener:
        """Listen at ``address``: ``nng+tcp://`` or ``nng+ipc://``, or the same without the
        qualifier (``tcp://h:1``, as the kernel passes an address it was told to listen at).

        Raises:
            ValueError: the address is of another form (the message gives the expected ones).
            TransportError: it cannot be bound.
        """
        if address.split("://", 1)[0] in self.schemes:
            address = f"{self.name}+{address}"
        where = parse_qualified(address, self.name)
        with exit_gate.inside(address):
            listener = NngListener(self.loop(), self.gate, self.track, where, handler)
        self.track(listener)
        return listener

    def track(self, obj: NngConnection | NngListener) -> None:
        """Remember ``obj`` so :meth:`close` closes it."""
        with self._lock:
            self._objects.add(obj)

    def connect(self, address: str, handler: ConnectionHandler, timeout: float = 10.0) -> Connection:
        where = parse_qualified(address, self.name)
        deadline = time.monotonic() + timeout
        with exit_gate.inside(address):
            loop = self.loop()
            fd = _dial(where, address, deadline, timeout)
            sock = pair_socket()
            conn = _Dialed(loop, sock, handler, address, self.gate)
            self.track(conn)

            def stop() -> None:
                sock.close()
                conn.added.set()

            with exit_gate.stopping(stop):
                try:
                    hand_over(sock, fd)
                except OSError as exc:
                    sock.close()
                    raise TransportError(f"cannot connect to {address}: {exc}") from exc
                added = conn.added.wait(max(0.0, deadline - time.monotonic()))
            if not added or conn.closed or exit_gate.is_shut:
                sock.close()
                why = ("nng is shut down (this process is exiting)" if exit_gate.is_shut
                       else "the transport was closed" if conn.closed
                       else f"nng did not finish its handshake within {timeout:g} s")
                raise TransportError(f"cannot connect to {address}: {why}")
        conn.opening()
        handler.on_open(conn)
        loop.call(conn.start)
        return conn

    def default_address(self, *, spans_hosts: bool) -> str:
        return "nng+tcp://0.0.0.0:0" if spans_hosts else f"nng+ipc://{fresh_ipc_name(self.name)}"

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
            objects = list(self._objects)
            self._objects = weakref.WeakSet()
        if loop is None:
            return

        def close_all() -> None:
            for obj in objects:
                if isinstance(obj, NngListener):
                    obj.close_now()
                else:
                    obj.drop(None)

        loop.stop(close_all)
        self.gate.reset()
        for obj in objects:  # a thread inside nng_sendmsg has returned (its socket is closed)
            if isinstance(obj, NngConnection):
                obj.wait_senders(EXIT_WAIT)
