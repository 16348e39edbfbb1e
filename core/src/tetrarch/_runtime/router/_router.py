"""The router: one per OS process that takes part in a mesh (client, host agent, proc).

It listens on one address of the chosen transport, authenticates every connection
(:mod:`tetrarch._transport._auth`), keeps one route per peer address, and dispatches
incoming messages on the transport's I/O thread:

* ``PORT`` messages to registered port handlers (futures, receivers); a port opened
  with a ``sink`` may have the large payload of its messages received straight into
  memory it names, on transports with receive sinks (``Connection.supports_sinks``)
  and only once the connection is authenticated,
* ``CALL`` messages to the mailbox of a local actor,
* ``SYS`` messages to registered services (actors, launches, supervision, ports, host).

Services are handed the router explicitly; the router knows none of them (see the
layer map in :mod:`tetrarch._runtime`).

Sending never hops threads: the calling thread pickles and writes to the socket. A
message to our own address is dispatched in the calling thread.

A connection nobody vouched for yet costs little and not for long: it may send one
message of at most ``PRE_AUTH_LIMIT`` bytes (header included), it waits in one table of
accepted, unauthenticated connections (oldest first) that one thread closes when their
``auth_timeout`` passes, and past ``max_unauthenticated`` of them the oldest is closed.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ..._config import CONNECT_TIMEOUT, SPIN_US
from ..._log import get_logger
from ..._telemetry import _io
from ..._transport._auth import PRE_AUTH_LIMIT, Auth, AuthError, PeerInfo, Role, transport_key
from ..._transport._base import Connection, ConnectionClosed, HandshakeRefused, Transport, TransportError
from ..._transport._limits import PreAuthLimits, raise_open_file_limit
from ..._transport._route import pin_host
from ..._transport._waiting import WaitingRoom
from ..plumbing import _shm_wire
from ..plumbing._segments import host_key
from ..values import _outcome, _serial, _wire
from ..values._cuda import gpu_view
from ..values._early import EarlyCalls
from ..values._future import use_loop
from ..values._tombstones import Tombstones
from ._outbox import Outboxes
from ._sequencer import Sequencer

__all__ = ["Mailbox", "PeerRefused", "PeerUnreachable", "PortHandler", "PortSink", "Router", "ServiceHandler",
           "current_router", "install_router"]

_log = get_logger("router")
_decode, _PortHeader, _CallHeader = _wire.decode, _wire.PortHeader, _wire.CallHeader  # dispatch's hot path
_VIEW_MARK = _shm_wire.VIEW_MARK

PortHandler = Callable[[_wire.PortHeader, list], None]
#: ``sink(header, nbytes)``: a writable byte memoryview of ``nbytes`` for the payload of a
#: ``[header, payload]`` message to the port to be received into, or None (I/O thread).
PortSink = Callable[[_wire.PortHeader, int], "memoryview | None"]
ServiceHandler = Callable[[_wire.SysHeader, list, "Connection | None"], None]


class Mailbox(Protocol):
    """Where the router puts ``CALL`` messages for one local actor."""

    def deliver(self, hdr: _wire.CallHeader, payload: list) -> None:
        """Queue the call (any thread; must not block)."""
        ...

#: Seconds an accepted connection has to complete the handshake before it is closed.
_AUTH_TIMEOUT = 10.0
#: Accepted connections that may wait for authentication at once (all listeners of one
#: router together); past it the oldest is closed. As large as the listen backlog, so
#: a burst of peers dialing at once (a mesh's replies) fits in one accept sweep, yet it
#: bounds what anyone who can reach the address may hold: 512 file descriptors and, with
#: ``PRE_AUTH_LIMIT`` covering header and body of the one message a connection may
#: have in flight, about 512 x 8 KiB = 4 MiB of buffers (see ``Connection.max_message_size``).
_MAX_UNAUTHENTICATED = 512


class PeerUnreachable(TransportError, ConnectionError):
    """A peer could not be dialed or authenticated."""


class PeerRefused(PeerUnreachable):
    """A peer answered but refused the handshake (or failed it): it holds another secret."""


class Router:
    """Routes and connections of one process."""

    def __init__(self, transport: Transport, secret: bytes, *, name: str, listen_address: str | None = None,
                 spans_hosts: bool = False, auth_timeout: float = _AUTH_TIMEOUT,
                 max_unauthenticated: int = _MAX_UNAUTHENTICATED, lead_waiters: bool = True,
                 relays: bool = False) -> None:
        """Listen on ``listen_address`` (default: the transport's local default address).

        Args:
            relays: this process relays payloads to others (a host agent): it takes no CUDA IPC
                handles (see ``values._cuda``), and passes nothing on by reference (each receiver
                of a relayed call gets a copy of its own, as it would directly).
            lead_waiters: let threads waiting for a future read for this router's transport
                loop (the process's router); False for a helper router beside it (an attach's).
            auth_timeout: seconds an accepted connection has to authenticate.
            max_unauthenticated: accepted connections that may wait for authentication
                at once; a new one beyond it closes the oldest.

        Raises:
            ValueError: ``auth_timeout`` is not positive or ``max_unauthenticated`` < 1.
            TransportError: the address cannot be bound.
        """
        if not auth_timeout > 0:
            raise ValueError(f"auth_timeout must be a positive number of seconds, got {auth_timeout!r}")
        if max_unauthenticated < 1:
            raise ValueError(f"max_unauthenticated must be at least 1, got {max_unauthenticated!r}")
        # Every process of tetrarch (client, host agent, proc) makes one router: a soft
        # open-file limit of 1024 is too low for many peers, and the connection cap is half of it.
        raise_open_file_limit()
        self.transport = transport
        self.secret = secret
        self.name = name
        #: What this process says of itself in handshakes; peers with its host key share memory with it.
        self._info = PeerInfo(os.getpid(), host_key(), "" if relays else gpu_view())
        self._by_reference = not relays
        self._routes: dict[str, Connection] = {}
        self._lock = threading.Lock()
        self._dial_locks: dict[str, threading.Lock] = {}
        self._ports: dict[int, PortHandler] = {}
        self._sinks: dict[int, PortSink] = {}
        self._port_ids = itertools.count(1)
        self.mailboxes: dict[str, Mailbox] = {}  # actor key -> its mailbox
        self.stopped_actors = Tombstones()  # key -> why it is gone (bounded)
        self.early = EarlyCalls(self.mailboxes, self._refuse_call, name)  # calls ahead of their actor's spawn
        #: Delivers each sender's sequenced calls in its order, direct or relayed (:mod:`._sequencer`).
        self.sequencer = Sequencer()
        self._seqs: dict[str, itertools.count[int]] = {}  # address -> numbers of our sequenced messages to it
        self._services: dict[str, ServiceHandler] = {}
        self._peer_lost: list[Callable[[str, BaseException | None], None]] = []
        self._dialing = threading.local()
        self._watchers: dict[str, dict[int, Callable[[str], None]]] = {}
        self._watch_ids = itertools.count(1)
        self.dead_peers: dict[str, str] = {}  # address -> why it is gone
        self._closed = False
        self._outboxes = Outboxes(name)
        # Accepted connections not authenticated yet: a deadline each, the oldest closed past the cap.
        self._waiting = WaitingRoom(name, auth_timeout, max_unauthenticated,
                                    lambda c: bool(getattr(c.context, "done", False)))
        self.address = ""  # set before the listener can accept anything we would answer
        self.spans_hosts = spans_hosts
        listen = listen_address or transport.default_address(spans_hosts=spans_hosts)
        try:
            transport.use_key(transport_key(secret))  # before the first listen (Transport.use_key)
            # The transport's own handshake (if any) is held to the kernel's bounds on strangers.
            transport.limit_unauthenticated(PreAuthLimits(timeout=auth_timeout, max_pending=max_unauthenticated))
            self._listener = transport.listen(listen, self)
        except BaseException:
            self._closed = True
            self._outboxes.close()  # no router: end the flusher thread
            raise
        self.leader_loop = transport.leader_loop()  # threads waiting for replies may read for it
        if self.leader_loop is not None:
            self.leader_loop.spin_s = SPIN_US() / 1e6
        if lead_waiters:
            use_loop(self.leader_loop)
        self._waiting.start()  # a connection accepted already waits in the table for it
        self._listeners = [self._listener]
        self.address = self._listener.address
        self._own_addresses = {self.address}
        #: How this process names itself as the sender of sequenced messages (:mod:`._sequencer`).
        self.origin = f"{self.address}#{os.urandom(4).hex()}"

    # -- registration ---------------------------------------------------
    def open_port(self, handler: PortHandler, sink: PortSink | None = None) -> int:
        """A new port whose messages go to ``handler``; ``sink`` may name where a payload lands.

        A payload received into the sink reaches ``handler`` as the very memoryview the sink
        returned (so ``frames[0] is view`` means "already in place"); otherwise, as always,
        in a buffer of its own.
        """
        port = next(self._port_ids)
        self._ports[port] = handler
        if sink is not None:
            self._sinks[port] = sink
        return port

    def close_port(self, port: int) -> None:
        self._ports.pop(port, None)
        self._sinks.pop(port, None)

    def _resolve_sink(self, lead: list[bytes], sizes: list[int]) -> list[memoryview | None] | None:
        """The connections' ``SinkResolver``: a ``[PortHeader, payload]`` message to a port with a sink, or
        the large frames of a message that names them (``_shm_wire.receive_sinks``)."""
        if lead[0][:2] == _VIEW_MARK:
            return _shm_wire.receive_sinks(lead, sizes)
        if len(lead) != 1 or len(sizes) != 2 or not self._sinks:
            return None
        try:
            hdr = _decode(lead[0])
        except Exception:  # noqa: BLE001 - malformed: dispatch reports it when the message is whole
            return None
        if type(hdr) is not _PortHeader:
            return None
        sink = self._sinks.get(hdr.port)
        return None if sink is None else [sink(hdr, sizes[1])]

    def add_service(self, name: str, handler: ServiceHandler) -> None:
        self._services[name] = handler

    def on_peer_lost(self, callback: Callable[[str, BaseException | None], None]) -> None:
        """``callback(peer_address, error)`` runs (I/O thread) when a peer's connection drops."""
        self._peer_lost.append(callback)

    def watch(self, address: str, callback: Callable[[str], None]) -> int:
        """Call ``callback(reason)`` once if the process at ``address`` dies; returns a token.

        If it is already known dead, the callback runs immediately.
        """
        token = next(self._watch_ids)
        with self._lock:
            dead = self.dead_peers.get(address)
            if dead is None:
                self._watchers.setdefault(address, {})[token] = callback
        if dead is not None:
            callback(dead)
        return token

    def unwatch(self, address: str, token: int) -> None:
        watchers = self._watchers.get(address)
        if watchers is not None:
            watchers.pop(token, None)

    def mark_dead(self, address: str, reason: str) -> None:
        """Record that the process at ``address`` is gone and fail everything waiting on it."""
        with self._lock:
            if address in self.dead_peers:
                return
            self.dead_peers[address] = reason
            watchers = self._watchers.pop(address, {})
            conn = self._routes.pop(address, None)
        if conn is not None:
            conn.close()
        for cb in watchers.values():
            try:
                cb(reason)
            except Exception:  # noqa: BLE001 - one faulty watcher must not starve the others
                _log.exception("a death watcher of %s failed", address)
        # Reply collectors register nothing per call: each open port whose handler has targets is asked.
        for handler in list(self._ports.values()):
            died = getattr(handler, "target_died", None)
            if died is not None:
                try:
                    died(address, reason)
                except Exception:  # noqa: BLE001 - as above
                    _log.exception("a reply collector failed on the death of %s", address)

    def revive(self, address: str) -> None:
        """Forget that ``address`` was dead (a new process listens there now)."""
        with self._lock:
            self.dead_peers.pop(address, None)

    # -- sending ----------------------------------------------------------
    def send(self, address: str, frames: list, more: bool = False) -> None:
        """Send one message to the process listening at ``address``; ``more``: more messages to it follow
        soon (it may wait for them to go out in one write, see ``_outbox``).

        Raises:
            PeerRefused: the peer refused (or failed) the handshake: it holds another secret.
            PeerUnreachable: the peer cannot be reached (dead, or never existed).
        """
        if address in self._own_addresses:
            self.dispatch([memoryview(f) if not isinstance(f, memoryview) else f for f in frames], None)
            return
        conn = self._route(address)
        if _io.ON:
            _io.count(address, frames, _io.OUT)
        if len(frames) > 2:  # out-of-band buffers: shared memory on this host, reused memory on another
            frames = _shm_wire.prepare(frames, conn.context.peer, self._info,  # type: ignore[attr-defined]
                                      conn.supports_sinks, self._by_reference)
        # A burst joins the peer's outbox (one vectored write by the flusher); an isolated message goes out now.
        if self._outboxes.offer(address, conn, frames, more):
            return
        try:
            conn.send(frames)
        except ConnectionClosed as exc:
            _shm_wire.abandon(frames)
            raise PeerUnreachable(f"lost the connection to {address}: {exc}") from exc
        self._outboxes.wrote(address)

    def connect(self, address: str) -> None:
        """Make sure a connection to ``address`` is up, dialing it if needed (not from the I/O thread).

        Raises:
            PeerRefused, PeerUnreachable: as :meth:`send`.
        """
        if address not in self._own_addresses:
            self._route(address)

    def _route(self, address: str) -> Connection:
        """The connection to ``address``, dialed if there is none (raises as :meth:`connect`)."""
        conn = self._routes.get(address)
        if conn is None or conn.closed:
            dead = self.dead_peers.get(address)
            if dead is not None:
                raise PeerUnreachable(dead)
            conn = self._dial(address)
        return conn

    def next_seq(self, address: str) -> int:
        """Our next sequenced message's number to ``address`` (1, 2, ...); take it once connected, right before
        sending: a number never sent stalls the messages after it until that connection drops."""
        counter = self._seqs.get(address)
        if counter is None:
            counter = self._seqs.setdefault(address, itertools.count(1))
        return next(counter)

    def send_call(self, address: str, actor: str, method: str, reply_addr: str | None, reply_port: int | None,
                  rank: int, labels: tuple[str, ...], sizes: tuple[int, ...], payload: list, trace: Any = None) -> None:
        """Send a sequenced ``CALL`` (``trace``: its trace field): after every call we sent its process before.

        Raises:
            PeerRefused, PeerUnreachable: as :meth:`send`.
        """
        hdr = _wire.call_header(actor, method, reply_addr, reply_port, rank, labels, sizes, *self.stamp(address), trace)
        self.send(address, [hdr, *payload])

    def stamp(self, address: str) -> tuple[str, int]:
        """``(origin, number)`` for a sequenced message to ``address``, once a connection is up (raises as
        :meth:`connect`): a number is never taken for a message that cannot leave."""
        self.connect(address)
        return self.origin, self.next_seq(address)

    def reply(self, address: str | None, port: int | None, tag: int, status: int, value: Any,
              origin: tuple[str, str] = ("", ""), more: bool = False) -> None:
        """Send ``value`` to ``port`` at ``address`` (no-op without a port); unreachable peers are ignored.

        A ``value`` that cannot be pickled is replaced by an error naming the cause and
        ``origin`` (the actor and endpoint that produced it), which the caller gets as ActorError.
        ``more``: as :meth:`send`.
        """
        if address is None or port is None:
            return
        try:
            payload = _serial.dumps(value)
        except Exception as exc:  # noqa: BLE001 - an unpicklable result becomes an error for the caller
            status = _wire.ERR
            payload = _serial.dumps(_outcome.unpicklable_result(exc, value, *origin))
        try:
            self.send(address, [_wire.port_header(port, tag, status), *payload], more)
        except PeerUnreachable:
            pass

    def _dial(self, address: str) -> Connection:
        if getattr(self._dialing, "in_dispatch", False):
            # We are on the I/O thread: the handshake needs it, so dial elsewhere and wait there.
            raise PeerUnreachable(f"cannot dial {address} from the I/O thread")
        with self._lock:
            lock = self._dial_locks.setdefault(address, threading.Lock())
        with lock:
            conn = self._routes.get(address)
            if conn is not None and not conn.closed:
                return conn
            auth = Auth(Role.DIALER, self.secret, self.address, self._info)
            self._dialing.auth = auth
            try:
                conn = self.transport.connect(address, self, timeout=CONNECT_TIMEOUT())
            except HandshakeRefused as exc:
                raise PeerRefused(f"{address} refused the transport's handshake: {exc}") from exc
            except (TransportError, ValueError) as exc:
                raise PeerUnreachable(f"cannot reach {address}: {exc}") from exc
            finally:
                self._dialing.auth = None
            limit = CONNECT_TIMEOUT()
            if not auth.event.wait(limit) or not auth.done:
                conn.close()
                if auth.error:
                    raise PeerRefused(f"{address} failed the authentication handshake ({auth.error})")
                if auth.event.is_set():  # on_close ended the wait
                    raise PeerRefused(
                        f"{address} closed the connection during the authentication handshake: it did not accept "
                        f"this process's proof of the allocation's secret (the two are of different allocations), "
                        f"or it is shutting down")
                raise PeerUnreachable(f"{address} did not answer the authentication handshake within {limit:g} s "
                                      f"(TETRARCH_CONNECT_TIMEOUT): it is stopped, hung or overloaded")
            auth.peer_address = address
            with self._lock:
                existing = self._routes.get(address)
                if existing is not None and not existing.closed:
                    return existing  # the peer dialed us meanwhile: keep one route per direction
                self._routes[address] = conn
            return conn

    # -- ConnectionHandler ------------------------------------------------
    def on_open(self, conn: Connection) -> None:
        conn.max_message_size = PRE_AUTH_LIMIT
        dialing = getattr(self._dialing, "auth", None)
        if dialing is not None:
            conn.context = dialing
            return
        auth = Auth(Role.LISTENER, self.secret, self.address, self._info)
        conn.context = auth
        try:
            conn.send(auth.hello())
        except ConnectionClosed:
            return
        self._waiting.add(conn)

    def on_message(self, conn: Connection, frames: list[memoryview]) -> None:
        auth: Auth = conn.context  # type: ignore[assignment]
        if auth.done:
            if _io.ON:
                _io.count(auth.peer_address or conn.peer, frames, _io.IN)
            if frames[0][0] == 0:  # a _shm_wire prefix (a header frame is a pickle: b"\x80...")
                try:
                    frames = _shm_wire.incoming(frames)
                except _shm_wire.Unreadable as exc:
                    self._unreadable(exc)
                    return
            self._dialing.in_dispatch = True
            try:
                self.dispatch(frames, conn)
            finally:
                self._dialing.in_dispatch = False
            return
        try:
            answer = auth.step(frames)
        except AuthError as exc:
            auth.error = str(exc)
            _log.warning("rejected connection from %s: %s", conn.peer, exc)
            conn.close()
            auth.event.set()
            return
        if answer is not None:
            try:
                conn.send(answer)
            except ConnectionClosed:
                return
        if auth.done:
            conn.max_message_size = 1 << 62
            if conn.supports_sinks:
                conn.sinks = self._resolve_sink
            if auth.role is Role.LISTENER:
                self._waiting.discard(conn)
                with self._lock:
                    existing = self._routes.get(auth.peer_address)
                    if existing is None or existing.closed:
                        self._routes[auth.peer_address] = conn
            auth.event.set()

    def on_close(self, conn: Connection, error: BaseException | None) -> None:
        auth = conn.context
        if not isinstance(auth, Auth):
            return
        if auth.role is Role.LISTENER and not auth.done:
            self._waiting.discard(conn)
        auth.event.set()
        peer = auth.peer_address
        if not peer or not auth.done:
            return
        if auth.peer.host_key and auth.peer.host_key == self._info.host_key:
            _shm_wire.forget(auth.peer.pid)
        with self._lock:
            if self._routes.get(peer) is conn:
                del self._routes[peer]
        self.sequencer.peer_lost(peer)
        if not self._closed:
            for cb in list(self._peer_lost):
                try:
                    cb(peer, error)
                except Exception:  # noqa: BLE001 - one faulty handler must not starve the others
                    _log.exception("a peer-lost handler failed for %s", peer)

    # -- dispatch -----------------------------------------------------------
    def dispatch(self, frames: list, conn: Connection | None) -> None:
        """Hand one authenticated message to its port, actor or service."""
        hdr = _decode(frames[0])
        if type(hdr) is _PortHeader:
            handler = self._ports.get(hdr.port)
            if handler is not None:
                handler(hdr, frames[1:])
        elif type(hdr) is _CallHeader:
            if hdr.seq:
                self.sequencer.admit(hdr.origin, hdr.seq, self._deliver_call, hdr, frames[1:])
            else:
                self._deliver_call(hdr, frames[1:])
        elif type(hdr) is _wire.SysHeader:
            service = self._services.get(hdr.service)
            if service is None:
                self.reply_later(hdr.reply_addr, hdr.reply_port, 0, _wire.DEAD,
                                 f"no service {hdr.service!r} in {self.name}")
            else:
                service(hdr, frames[1:], conn)

    def _deliver_call(self, hdr: _wire.CallHeader, payload: list) -> None:
        mailbox = self.mailboxes.get(hdr.actor)
        if mailbox is not None:
            mailbox.deliver(hdr, payload)
        else:
            why = self.stopped_actors.get(hdr.actor)
            if why is not None or not self.early.hold(hdr, payload):
                self._refuse_call(hdr, why or self.early.refusal(hdr.actor))

    def _refuse_call(self, hdr: _wire.CallHeader, why: str) -> None:
        self.reply_later(hdr.reply_addr, hdr.reply_port, hdr.rank, _wire.DEAD, why)

    def _unreadable(self, exc: _shm_wire.Unreadable) -> None:
        """A message whose payload was in shared memory that cannot be mapped: answer it with why."""
        why = str(exc)
        try:
            hdr = _decode(exc.header)
        except Exception:  # noqa: BLE001 - malformed: nothing to answer
            _log.warning("dropped a message: %s", why)
            return
        if type(hdr) is _PortHeader:
            handler = self._ports.get(hdr.port)
            if handler is not None:
                handler(hdr._replace(status=_wire.DEAD), _serial.dumps(why))
        elif type(hdr) is _CallHeader:
            self._refuse_call(hdr, why)
        else:
            _log.warning("dropped a %s message: %s", getattr(hdr, "service", "?"), why)
            if type(hdr) is _wire.SysHeader:
                self.reply_later(hdr.reply_addr, hdr.reply_port, 0, _wire.DEAD, why)

    def listen_routable(self, host: str | None = None) -> None:
        """Also listen where other hosts can reach us, and advertise that address from now on.

        For a client whose allocation spans hosts (``Allocator.spans_hosts``); a no-op
        when this router already listens routably. Connections to the old address keep
        working. ``host`` (an IP, from ``Allocator.client_host``) pins the listener to
        that interface; ``None``: the transport's default routable address.

        Raises:
            TransportError: the transport cannot span hosts (e.g. ``ipc``).
        """
        with self._lock:
            if self.spans_hosts:
                return
            listener = self.transport.listen(pin_host(self.transport.default_address(spans_hosts=True), host), self)
            self._listeners.append(listener)
            self._own_addresses.add(listener.address)
            self.address = listener.address
            self.spans_hosts = True

    def is_local(self, address: str | None) -> bool:
        """Whether ``address`` is one this router listens on."""
        return address in self._own_addresses

    def on_io_thread(self) -> bool:
        """Whether the calling thread is dispatching a message (it must not dial: use the ``*_later`` sends)."""
        return getattr(self._dialing, "in_dispatch", False)

    def connected(self, address: str) -> bool:
        """Whether a message to ``address`` would go out without dialing (a route is up, or it is ours)."""
        conn = self._routes.get(address)
        return (conn is not None and not conn.closed) or address in self._own_addresses

    def reply_later(self, address: str | None, port: int | None, tag: int, status: int, value: Any) -> None:
        """:meth:`reply`, from a handler on the I/O thread (dials on a helper thread if needed)."""
        if address is None or port is None:
            return
        if self.connected(address):
            self.reply(address, port, tag, status, value)
        else:
            threading.Thread(target=self.reply, args=(address, port, tag, status, value), daemon=True).start()

    def send_later(self, address: str, frames: list) -> None:
        """:meth:`send`, from a handler on the I/O thread (dials on a helper thread if needed);
        an unreachable peer is ignored."""

        def go() -> None:
            try:
                self.send(address, frames)
            except PeerUnreachable:
                pass

        if self.connected(address):
            go()
        else:
            threading.Thread(target=go, daemon=True).start()

    # -- lifecycle ------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self.early.close()
        self._closed = True
        self._outboxes.close()  # let queued messages go out first
        for listener in self._listeners:
            listener.close()
        waiting = self._waiting.close()
        with self._lock:
            conns = list(self._routes.values())
            self._routes.clear()
        for conn in waiting + conns:
            conn.close()


# -- this process's router -----------------------------------------------------------
_current: list[Router] = []


def install_router(router: Router) -> None:
    """Make ``router`` the one objects found in this process (ports, unpickled meshes) use."""
    _current[:] = [router]


def current_router() -> Router | None:
    """This process's router, once the process wiring (:mod:`._root`) installed one."""
    return _current[0] if _current else None
