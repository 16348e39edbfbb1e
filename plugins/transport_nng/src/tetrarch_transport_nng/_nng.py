"""The nng transport (pynng): ``nng+tcp://host:port`` and ``nng+ipc:///path`` / ``nng+ipc://@name``.

nng hides connections behind sockets; the kernel needs them (per-connection
authentication, ordering and ``on_close``). Each :class:`~tetrarch.plugins.Connection`
is therefore one nng ``pair0`` socket holding exactly one pipe, on both sides:

* A listener is a ``rep0`` socket at the advertised address. A dialer sends it one
  request (a magic and a random token) from a ``req0`` socket; the listener opens a
  fresh ``pair0`` socket for that connection (same host, port 0 / a fresh abstract
  name), answers with its address and closes nothing else. The dialer dials it with its
  own ``pair0`` socket and sends the token as the first message; the listener's side
  opens the connection when the token matches (pipes that bring anything else are
  closed).
* Strangers: until it opens, a would-be connection (its ``rep0`` pipe, then the ``pair0``
  socket handed out for it) holds one ticket of the transport's :class:`~._gate.Gate`,
  which holds that stage to the kernel's :class:`~tetrarch.plugins.PreAuthLimits`
  (:meth:`NngTransport.limit_unauthenticated`): closed past ``timeout``, the oldest closed
  past ``max_pending``, new pipes refused while open connections fill
  ``connection_limit()``. nng buffers at most one rendezvous request per ``rep0`` pipe
  (``recv_max_size``) and two ``CHUNK``-sized messages per unclaimed ``pair0`` socket (one
  its pipe reads, one queued). nng itself closes a connection that does not finish the
  8-byte SP header exchange within 10 s; those never reach this code.
* Dials: a dial that finds the listener's backlog full (``NNG_EAGAIN``: a Unix socket's
  ``connect`` does not wait for room as TCP's does) is retried until the connect timeout.
* Why not one polyamorous ``pair1`` socket per listener with per-pipe sends, which
  nng offers: its per-pipe send queue holds two messages and the socket *drops*
  whatever does not fit (``pair1_poly.c``: "we just discard the message" to avoid
  head-of-line blocking), so replies to a busy peer would vanish silently. ``bus0`` is
  best effort as well, and ``req0``/``rep0`` force lock-step. A ``pair0`` socket with one
  pipe gives a reliable, ordered, back-pressured stream per connection.
* Closing: pipe notifications (``add_post_pipe_remove_cb``) tell when the peer's pipe
  went away (a process that dies closes its sockets; the OS tells nng at once); the
  I/O thread then delivers what was queued and reports ``on_close``. TCP keepalive is
  on for silent host deaths. Dialers never redial (a huge reconnect interval and a
  pre-connect hook that rejects any second pipe).
"""

from __future__ import annotations

import atexit
import contextlib
import hmac
import secrets
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import pynng
from pynng import ffi, lib

from tetrarch._log import get_logger
from tetrarch.plugins import (
    Connection,
    ConnectionHandler,
    IoLoop,
    Listener,
    PreAuthLimits,
    QualifiedAddress,
    Transport,
    TransportError,
    advertised_host,
    batch_helper_threads,
    fresh_ipc_name,
    parse_qualified,
)

from ._conn import CHUNK, NngConnection, new_msg
from ._gate import Gate, Ticket

__all__ = ["NngTransport"]

_log = get_logger("transport.nng")

_MAGIC = b"TETRARCH-NNG/1"
_TOKEN = 16
_REQUEST = len(_MAGIC) + _TOKEN
#: Bytes req0 puts in front of a request's body on the wire (its request id): the most a
#: ``rep0`` pipe may bring in one message is ``_REQUEST + _REQ_ID``.
_REQ_ID = 4
#: Messages nng queues per socket before this side reads them (each at most ``CHUNK`` bytes).
_RECV_BUFFER = 8
#: The same for a connection's socket until its dialer has claimed it (nng's pipe reads one
#: more message itself): what a stranger on an unclaimed socket can make nng hold.
_UNCLAIMED_RECV_BUFFER = 1
#: Longest pause between two tries of a dial that found the listener's backlog full.
_BACKLOG_PAUSE_MAX = 0.05
#: Messages nng queues per socket for sending (room for the kernel's small control messages,
#: which the I/O thread sends without blocking: ``NngConnection._sendmsg``).
_SEND_BUFFER = 64
_NEVER_MS = 24 * 3600 * 1000
#: nng's task threads in this process (nng's default: twice the CPUs). They run nng's internal
#: completions only (every callback of ours runs on the transport's loop), and each message
#: hands off to them about twice; with fewer, more hand-offs find one awake. 8-proc round on 2
#: cores, 6 alternations: 1.13-1.24 ms with nng's 4, 1.07-1.14 ms with 2 (nng's minimum).
#: Set before nng starts (it ignores the call once running, e.g. after a program's own use of pynng).
_TASK_THREADS = 2
if hasattr(lib, "nng_init_set_parameter"):  # nng 1.8+
    lib.nng_init_set_parameter(lib.NNG_INIT_NUM_TASK_THREADS, _TASK_THREADS)


_threads_set = False


def _pair(scheme: str, recv_buffer: int = _RECV_BUFFER) -> pynng.Pair0:
    global _threads_set
    sock = pynng.Pair0(recv_max_size=CHUNK, recv_buffer_size=recv_buffer, send_buffer_size=_SEND_BUFFER,
                       reconnect_time_min=_NEVER_MS, reconnect_time_max=_NEVER_MS)
    if not _threads_set:  # nng started its threads with its first socket (all of them, for good)
        batch_helper_threads("nng:")
        _threads_set = True
    if scheme == "tcp":
        sock.tcp_keepalive = True
    return sock


def _url(where: QualifiedAddress) -> str:
    """``where`` as nng takes it: Linux's abstract names (``@name``) are nng's ``abstract://`` scheme."""
    if where.scheme == "ipc" and where.path.startswith("@"):
        return f"abstract://{where.path[1:]}"
    return where.native()


def _err(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _dial(sock: pynng.Socket, url: str, deadline: float, address: str, timeout: float) -> None:
    """Dial ``url`` (blocking), trying again while the listener's backlog is full until ``deadline``.

    Raises:
        TransportError: the backlog stayed full until ``deadline``.
        pynng.NNGException: the dial failed otherwise (refused, closed, ...).
    """
    pause = 0.001
    while True:
        try:
            sock.dial(url, block=True)
            return
        except pynng.TryAgain:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransportError(f"cannot connect to {address}: its listen backlog stayed full "
                                     f"for {timeout:g} s") from None
            time.sleep(min(pause, left))  # back off while the listener drains its backlog (not synchronization)
            pause = min(2 * pause, _BACKLOG_PAUSE_MAX)


class _Accepted(NngConnection):
    """The listener's side: opens when the dialer that asked for it brings its token."""

    def __init__(self, loop: IoLoop, sock: pynng.Pair0, handler: ConnectionHandler, peer: str, token: bytes,
                 owner: _NngListener, ticket: Ticket, rep_pipe: Any) -> None:
        super().__init__(loop, sock, handler, peer)
        self._token = token
        self._owner = owner
        self._gate = owner.gate
        self._ticket: Ticket | None = ticket
        self._rep_pipe = rep_pipe  # the rendezvous pipe (nng_pipe): closed once this opens or goes
        self._pipe_id: int | None = None
        self._removed: set[int] = set()  # pipes gone before they were claimed
        self._claim_lock = threading.Lock()
        sock.add_pre_pipe_connect_cb(self._pre_pipe)
        sock.add_post_pipe_remove_cb(self._pipe_removed)

    # nng threads
    def _pre_pipe(self, pipe: pynng.Pipe) -> None:
        with self._claim_lock:
            if self._pipe_id is not None:
                pipe.close()  # claimed already: one pipe per connection

    def _pipe_removed(self, pipe: pynng.Pipe) -> None:
        with self._claim_lock:
            if self._pipe_id is None:
                self._removed.add(pipe.id)
                return
        if pipe.id == self._pipe_id:
            self.pipe_alive = False
            self._loop.call(self.pipe_gone)

    # I/O thread
    def claim_or_expire(self) -> None:
        """The gate closes this (past its deadline, or the oldest past the cap) unless it opened."""
        if self._pipe_id is None and not self._closed:
            self._closed = True
            self.drop_unopened()

    def _close_rep_pipe(self) -> None:
        if self._rep_pipe is not None:
            lib.nng_pipe_close(self._rep_pipe)  # nng_pipe_close of a pipe gone already returns an error
            self._rep_pipe = None

    def drop_unopened(self) -> None:
        self._owner.pending.pop(self, None)
        self._gate.leave(self._ticket)
        self._close_rep_pipe()
        self._close_reported = True  # never opened: nobody to tell
        self.drop(None)

    def drop(self, error: BaseException | None) -> None:
        super().drop(error)
        self._gate.released(self)

    def on_readable(self) -> None:
        if self._pipe_id is not None:
            super().on_readable()
            return
        msg = self.recv_nowait()
        if msg is None:
            return
        pipe = lib.nng_msg_get_pipe(msg)
        ok = (lib.nng_msg_len(msg) == _TOKEN
              and hmac.compare_digest(bytes(ffi.buffer(lib.nng_msg_body(msg), _TOKEN)), self._token))
        lib.nng_msg_free(msg)
        if not ok:
            lib.nng_pipe_close(pipe)  # someone else than the dialer that asked: keep waiting for it
            return
        with self._claim_lock:
            self._pipe_id = lib.nng_pipe_id(pipe)
            gone = self._pipe_id in self._removed
            self._removed.clear()
        self._owner.pending.pop(self, None)
        if not self._gate.leave(self._ticket):  # the gate closed it meanwhile (its closer is queued)
            self.drop_unopened()
            return
        self._ticket = None
        if gone:  # the dialer left right after claiming: nobody to open for
            self.pipe_alive = False
            self.drop_unopened()
            return
        self._gate.opened(self)
        self._close_rep_pipe()  # the dialer is done with the rendezvous
        self._sock.recv_buffer_size = _RECV_BUFFER
        try:
            self._handler.on_open(self)
        except Exception:  # noqa: BLE001 - a faulty handler must not kill the I/O thread
            self.drop_unopened()
            return


class _Dialed(NngConnection):
    def __init__(self, loop: IoLoop, sock: pynng.Pair0, handler: ConnectionHandler, peer: str, gate: Gate) -> None:
        super().__init__(loop, sock, handler, peer)
        self._gate = gate
        self._pipe_id: int | None = None
        self._lock = threading.Lock()
        sock.add_pre_pipe_connect_cb(self._pre_pipe)
        sock.add_post_pipe_remove_cb(self._pipe_removed)

    def _pre_pipe(self, pipe: pynng.Pipe) -> None:
        with self._lock:
            if self._pipe_id is not None:
                pipe.close()  # never a second pipe (nng would redial after a drop)
            else:
                self._pipe_id = pipe.id

    def _pipe_removed(self, pipe: pynng.Pipe) -> None:
        if pipe.id == self._pipe_id:
            self.pipe_alive = False
            self._loop.call(self.pipe_gone)

    def drop(self, error: BaseException | None) -> None:
        super().drop(error)
        self._gate.released(self)


class _NngListener(Listener):
    def __init__(self, transport: NngTransport, where: QualifiedAddress, handler: ConnectionHandler) -> None:
        self._loop = transport.loop()
        self._transport = transport
        self._scheme = scheme = where.scheme
        url = _url(where)
        self._handler = handler
        self._closed = False
        self._rep_closed = False
        self.gate = transport.gate
        self.pending: dict[_Accepted, None] = {}  # sockets handed out and not claimed yet
        self._tickets: dict[int, Ticket] = {}  # rep0 pipe id -> its ticket, until its request is answered
        self._rep = pynng.Rep0(recv_max_size=_REQUEST + _REQ_ID, recv_buffer_size=_RECV_BUFFER)
        if scheme == "tcp":
            self._rep.tcp_keepalive = True
        self._rep.add_pre_pipe_connect_cb(self._rep_pipe_added)
        self._rep.add_post_pipe_remove_cb(self._rep_pipe_removed)
        try:
            listener = self._rep.listen(url)
        except pynng.NNGException as exc:
            self._rep.close()
            raise TransportError(f"cannot listen on {url}: {_err(exc)}") from exc
        if scheme == "tcp":
            local = str(listener.local_address)  # pynng's SockAddr.port is in network byte order: use the text
            host, _, port = local.rpartition(":")
            self._bind_host = host
            self._address = f"nng+tcp://{advertised_host(host.strip('[]'))}:{port}"
        else:
            self._bind_host = ""
            self._address = f"nng+ipc://{where.path}"
        self._fd = self._rep.recv_fd
        self._loop.call(lambda: self._loop.watch(self._fd, self))
        self.gate.listening(+1)

    @property
    def address(self) -> str:
        return self._address

    # nng threads
    def _rep_pipe_added(self, pipe: pynng.Pipe) -> None:
        """A peer finished nng's header exchange: it waits for its opening, if the gate lets it in."""
        if self._closed:
            pipe.close()
            return
        peer = str(pipe.remote_address) if self._scheme == "tcp" else f"{self._address} (pipe {pipe.id})"
        ticket = self.gate.admit(lambda: lib.nng_pipe_close(pipe.pipe), peer, pipe.id)
        if ticket is None:
            pipe.close()  # open connections fill the limit (the gate logged it)
            return
        self._tickets[pipe.id] = ticket

    def _rep_pipe_removed(self, pipe: pynng.Pipe) -> None:
        self.gate.leave(self._tickets.pop(pipe.id, None))

    # I/O thread
    def on_error(self, exc: BaseException) -> None:
        pass

    def on_readable(self) -> None:
        for _ in range(16):
            if self._closed:
                return
            msg_p = ffi.new("nng_msg **")
            if lib.nng_recvmsg(self._rep.socket, msg_p, lib.NNG_FLAG_NONBLOCK) != 0:
                return
            msg = msg_p[0]
            n = lib.nng_msg_len(msg)
            request = bytes(ffi.buffer(lib.nng_msg_body(msg), n)) if n == _REQUEST else b""
            pipe = lib.nng_msg_get_pipe(msg)
            lib.nng_msg_free(msg)
            ticket = self._tickets.pop(lib.nng_pipe_id(pipe), None)
            if not request.startswith(_MAGIC) or ticket is None or not self.gate.holds(ticket):
                lib.nng_pipe_close(pipe)  # not one of ours, a second request, or closed by the gate meanwhile
                self.gate.leave(ticket)
                continue
            self._accept(request[len(_MAGIC):], pipe, ticket)

    def _accept(self, token: bytes, pipe: Any, ticket: Ticket) -> None:
        sock = _pair(self._scheme, _UNCLAIMED_RECV_BUFFER)
        where = (f"tcp://{self._bind_host}:0" if self._scheme == "tcp"
                 else _url(QualifiedAddress("nng", "ipc", path=fresh_ipc_name("nng"))))
        try:
            listener = sock.listen(where)
        except pynng.NNGException as exc:
            sock.close()
            lib.nng_pipe_close(pipe)
            self.gate.leave(ticket)
            _log.warning("nng listener %s cannot open a connection socket: %s", self._address, _err(exc))
            return
        if self._scheme == "tcp":
            port = str(listener.local_address).rpartition(":")[2]
            host = self._address[len("nng+tcp://"):].rpartition(":")[0]
            where = f"tcp://{host}:{port}"
            peer = str(pynng.Pipe(pipe, self._rep).remote_address)
        else:
            peer = f"{self._address} (accepted)"
        conn = _Accepted(self._loop, sock, self._handler, peer, token, self, ticket, pipe)
        self._transport.track(conn)
        self.pending[conn] = None
        if not self.gate.hand_over(ticket, conn.claim_or_expire):  # closed by the gate meanwhile
            conn.drop_unopened()
            return
        reply, body = new_msg(len(where))
        ffi.memmove(body, where.encode(), len(where))
        lib.nng_msg_set_pipe(reply, pipe)
        if lib.nng_sendmsg(self._rep.socket, reply, lib.NNG_FLAG_NONBLOCK) != 0:
            lib.nng_msg_free(reply)
            conn.drop_unopened()
            return
        conn.start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call(self.close_now)

    def close_now(self) -> None:
        """Stop listening (I/O thread); connections not claimed yet go too."""
        self._loop.unwatch(self._fd)
        if not self._rep_closed:
            self._rep_closed = True
            self.gate.listening(-1)
        self._closed = True
        self._rep.close()  # nng removes an ipc path it created
        for ticket in list(self._tickets.values()):
            self.gate.leave(ticket)
        self._tickets.clear()
        for conn in list(self.pending):
            conn.drop_unopened()


class NngTransport(Transport):
    """tetrarch messages over nng (pynng): ``nng+tcp://`` and ``nng+ipc://`` addresses."""

    name = "nng"
    schemes = ("tcp", "ipc")

    def __init__(self) -> None:
        self._loop: IoLoop | None = None
        self._lock = threading.Lock()
        self._objects: weakref.WeakSet[NngConnection | _NngListener] = weakref.WeakSet()
        #: Would-be connections waiting for their opening, and open ones (the kernel's bounds).
        self.gate = Gate(self.loop)
        _live.add(self)

    def limit_unauthenticated(self, limits: PreAuthLimits) -> None:
        """Hold the rendezvous (``rep0`` pipes, unclaimed ``pair0`` sockets) to ``limits`` (see ``_gate``)."""
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
        where = parse_qualified(address, self.name)
        with _exit_gate.inside(address):
            listener = _NngListener(self, where, handler)
        self.track(listener)
        return listener

    def track(self, obj: NngConnection | _NngListener) -> None:
        """Remember ``obj`` so :meth:`close` closes it."""
        with self._lock:
            self._objects.add(obj)

    def connect(self, address: str, handler: ConnectionHandler, timeout: float = 10.0) -> Connection:
        target = parse_qualified(address, self.name)
        scheme, url = target.scheme, _url(target)
        token = secrets.token_bytes(_TOKEN)
        ms = max(1, int(timeout * 1000))
        deadline = time.monotonic() + timeout
        with _exit_gate.inside(address):
            loop = self.loop()
            try:
                with _exit_gate.closing(pynng.Req0(recv_timeout=ms, send_timeout=ms, recv_max_size=4096)) as req:
                    _dial(req, url, deadline, address, timeout)
                    req.send(_MAGIC + token)
                    where = req.recv().decode()
            except pynng.NNGException as exc:
                raise TransportError(f"cannot connect to {address}: {_err(exc)}") from exc
            sock = _pair(scheme)
            conn = _Dialed(loop, sock, handler, address, self.gate)
            self.track(conn)
            try:
                with _exit_gate.closing(sock, keep=True):
                    _dial(sock, where, deadline, address, timeout)
                    sock.send_timeout = ms
                    sock.send(token)
                    sock.send_timeout = -1
            except pynng.NNGException as exc:
                sock.close()
                raise TransportError(f"cannot connect to {address} ({where}): {_err(exc)}") from exc
            except TransportError:
                sock.close()
                raise
        self.gate.opened(conn)
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
                if isinstance(obj, _NngListener):
                    obj.close_now()
                else:
                    obj.drop(None)

        loop.stop(close_all)
        self.gate.reset()
        for obj in objects:  # a thread inside nng_sendmsg has returned (its socket is closed)
            if isinstance(obj, NngConnection):
                obj.wait_senders(_EXIT_WAIT)


#: Every transport of this process, closed at exit before pynng's ``nng_fini`` runs.
_live: weakref.WeakSet[NngTransport] = weakref.WeakSet()
#: Seconds exit waits for a sender still inside nng once its socket is closed.
_EXIT_WAIT = 1.0


class _ExitGate:
    """Keeps threads out of nng once the process exits (``nng_fini`` frees what they would use).

    A ``connect`` or ``listen`` runs :meth:`inside` the gate; after :meth:`shut` they raise
    TransportError without entering nng. The sockets a ``connect`` waits on are closed by
    :meth:`shut`, so a dial blocked for its timeout returns at once.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shut = False
        self._inside = 0
        self._socks: set[pynng.Socket] = set()

    @contextlib.contextmanager
    def inside(self, address: str) -> Iterator[None]:
        with self._cond:
            if self._shut:
                raise TransportError(f"cannot use {address}: nng is shut down (this process is exiting)")
            self._inside += 1
        try:
            yield
        finally:
            with self._cond:
                self._inside -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def closing(self, sock: pynng.Socket, keep: bool = False) -> Iterator[pynng.Socket]:
        """``sock`` (closed on leaving unless ``keep``), closed by :meth:`shut` meanwhile."""
        with self._cond:
            self._socks.add(sock)
        try:
            yield sock
        finally:
            with self._cond:
                self._socks.discard(sock)
            if not keep:
                sock.close()

    def shut(self, wait: float) -> None:
        """Refuse new entries, close the sockets dials wait on, wait up to ``wait`` s for the rest."""
        with self._cond:
            self._shut = True
            socks = list(self._socks)
        for sock in socks:
            try:
                sock.close()
            except Exception:  # noqa: BLE001 - closing a socket nng tore down already
                pass
        with self._cond:
            self._cond.wait_for(lambda: self._inside == 0, wait)


_exit_gate = _ExitGate()


@atexit.register  # registered after pynng's own handler, so it runs first
def _close_at_exit() -> None:
    """Close every transport before pynng's atexit ``nng_fini`` frees nng's state.

    Without it a daemon thread still sending (a proc's output forwarder, a reply) calls
    into nng after ``nng_fini`` and nng aborts the process (``panic: pthread_mutex_lock``);
    one that dials (a heartbeat whose connection closed) gets SIGFPE inside nng. Once
    closed, a send raises ConnectionClosed and a dial TransportError without entering nng.
    """
    _exit_gate.shut(_EXIT_WAIT)
    for transport in list(_live):
        try:
            transport.close()
        except Exception:  # noqa: BLE001 - exiting: close what can be closed
            pass
