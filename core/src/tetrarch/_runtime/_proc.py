"""The proc runtime: one per OS process that takes part in a mesh.

It listens on one address of the chosen transport, authenticates every connection
(:mod:`tetrarch._transport._auth`), keeps one route per peer address, and dispatches
incoming messages on the transport's I/O thread:

* ``PORT`` messages to registered port handlers (futures, receivers),
* ``CALL`` messages to the mailbox of a local actor,
* ``SYS`` messages to registered services (proc agent, host agent, client).

Sending never hops threads: the calling thread pickles and writes to the socket. A
message to our own address is dispatched in the calling thread.
"""

from __future__ import annotations

import itertools
from time import perf_counter as _perf_counter
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._config import CONNECT_TIMEOUT
from .._transport._auth import PRE_AUTH_LIMIT, Auth, AuthError, Role
from .._transport._base import Connection, ConnectionClosed, Transport, TransportError
from . import _serial, _wire

if TYPE_CHECKING:
    from ._instance import ActorInstance

__all__ = ["PeerUnreachable", "ProcRuntime", "PortHandler", "ServiceHandler"]

PortHandler = Callable[[tuple, list], None]
ServiceHandler = Callable[[tuple, list, "Connection | None"], None]

_AUTH_TIMEOUT = 10.0


_COALESCE_S = 50e-6


class _Outbox:
    """Messages for one peer waiting for the flusher thread."""

    __slots__ = ("queue", "busy", "scheduled", "last", "conn")

    def __init__(self) -> None:
        self.queue: list[list] = []
        self.busy = False
        self.scheduled = False
        self.last = 0.0
        self.conn: Connection | None = None


class PeerUnreachable(ConnectionError):
    """A peer could not be dialed or authenticated."""


class ProcRuntime:
    """Router and connection table of one process."""

    def __init__(self, transport: Transport, secret: bytes, *, name: str, listen_address: str | None = None,
                 spans_hosts: bool = False) -> None:
        self.transport = transport
        self.secret = secret
        self.name = name
        self._routes: dict[str, Connection] = {}
        self._lock = threading.Lock()
        self._dial_locks: dict[str, threading.Lock] = {}
        self._ports: dict[int, PortHandler] = {}
        self._port_ids = itertools.count(1)
        self.actors: dict[str, ActorInstance] = {}
        self.stopped_actors: dict[str, str] = {}  # key -> why it is gone
        self._services: dict[str, ServiceHandler] = {}
        self._peer_lost: list[Callable[[str, BaseException | None], None]] = []
        self._dialing = threading.local()
        self._watchers: dict[str, dict[int, Callable[[str], None]]] = {}
        self._watch_ids = itertools.count(1)
        self.dead_peers: dict[str, str] = {}  # address -> why it is gone
        self._closed = False
        self._olock = threading.Lock()
        self._ocond = threading.Condition(self._olock)
        self._outboxes: dict[str, _Outbox] = {}
        self._flush_queue: list[_Outbox] = []
        self._flusher = threading.Thread(target=self._flush_loop, name=f"tetrarch-flush-{name}", daemon=True)
        self._flusher.start()
        self.address = ""  # set before the listener can accept anything we would answer
        listen = listen_address or transport.default_address(spans_hosts=spans_hosts)
        self._listener = transport.listen(listen, self)
        self.address = self._listener.address

    # -- registration ---------------------------------------------------
    def open_port(self, handler: PortHandler) -> int:
        port = next(self._port_ids)
        self._ports[port] = handler
        return port

    def close_port(self, port: int) -> None:
        self._ports.pop(port, None)

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
            except Exception as exc:  # noqa: BLE001
                print(f"tetrarch[{self.name}]: death watcher failed: {exc!r}", file=sys.stderr)

    def revive(self, address: str) -> None:
        """Forget that ``address`` was dead (a new process listens there now)."""
        with self._lock:
            self.dead_peers.pop(address, None)

    # -- sending ----------------------------------------------------------
    def send(self, address: str, frames: list) -> None:
        """Send one message to the process listening at ``address``.

        Raises:
            PeerUnreachable: the peer cannot be reached (dead, or never existed).
        """
        if address == self.address:
            self.dispatch([memoryview(f) if not isinstance(f, memoryview) else f for f in frames], None)
            return
        conn = self._routes.get(address)
        if conn is None or conn.closed:
            dead = self.dead_peers.get(address)
            if dead is not None:
                raise PeerUnreachable(dead)
            conn = self._dial(address)
        # Coalesce bursts: a message that follows another to the same peer within
        # _COALESCE_S (or while earlier ones are queued) joins a batch that the flusher
        # thread writes with one vectored syscall; an isolated message goes out now.
        now = _perf_counter()
        with self._olock:
            box = self._outboxes.get(address)
            if box is None:
                box = self._outboxes[address] = _Outbox()
            if box.queue or box.busy or now - box.last < _COALESCE_S:
                box.queue.append(frames)
                box.conn = conn
                if not box.scheduled:
                    box.scheduled = True
                    self._flush_queue.append(box)
                    self._ocond.notify()
                return
            box.last = now
        try:
            conn.send(frames)
        except ConnectionClosed as exc:
            raise PeerUnreachable(f"lost the connection to {address}: {exc}") from exc

    def _flush_loop(self) -> None:
        while True:
            with self._olock:
                while not self._flush_queue and not self._closed:
                    self._ocond.wait()
                if self._closed and not self._flush_queue:
                    return
                boxes, self._flush_queue = self._flush_queue, []
                batches = []
                for box in boxes:
                    batches.append((box, box.conn, box.queue))
                    box.queue = []
                    box.busy = True
                    box.scheduled = False
            for box, conn, batch in batches:
                try:
                    conn.send_many(batch)
                except ConnectionClosed:
                    pass  # the peer is gone; pending calls fail through supervision
                except Exception as exc:  # noqa: BLE001
                    print(f"tetrarch[{self.name}]: flushing messages failed: {exc!r}", file=sys.stderr)
                with self._olock:
                    box.busy = False
                    box.last = _perf_counter()
                    if box.queue and not box.scheduled:
                        box.scheduled = True
                        self._flush_queue.append(box)

    def reply(self, address: str | None, port: int | None, tag: int, status: int, value: Any) -> None:
        """Send ``value`` to ``port`` at ``address`` (no-op without a port); unreachable peers are ignored."""
        if address is None or port is None:
            return
        try:
            payload = _serial.dumps(value)
        except Exception as exc:  # noqa: BLE001 - an unpicklable result becomes an error for the caller
            from .._errors import RemoteException

            status = _wire.ERR
            payload = _serial.dumps(
                (RemoteException("PicklingError", f"the result could not be pickled: {exc!r}"), "", "", "")
            )
        try:
            self.send(address, [_wire.header(_wire.PORT, port, tag, status), *payload])
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
            auth = Auth(Role.DIALER, self.secret, self.address)
            self._dialing.auth = auth
            try:
                conn = self.transport.connect(address, self, timeout=CONNECT_TIMEOUT())
            except (TransportError, ValueError) as exc:
                raise PeerUnreachable(f"cannot reach {address}: {exc}") from exc
            finally:
                self._dialing.auth = None
            if not auth.event.wait(CONNECT_TIMEOUT()) or not auth.done:
                conn.close()
                raise PeerUnreachable(f"{address} did not complete the authentication handshake ({auth.error or 'timeout'})")
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
        auth = Auth(Role.LISTENER, self.secret, self.address)
        conn.context = auth
        timer = threading.Timer(_AUTH_TIMEOUT, lambda: None if auth.done else conn.close())
        timer.daemon = True
        timer.start()
        try:
            conn.send(auth.hello())
        except ConnectionClosed:
            pass

    def on_message(self, conn: Connection, frames: list[memoryview]) -> None:
        auth: Auth = conn.context  # type: ignore[assignment]
        if auth.done:
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
            print(f"tetrarch[{self.name}]: rejected connection from {conn.peer}: {exc}", file=sys.stderr)
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
            if auth.role is Role.LISTENER:
                with self._lock:
                    existing = self._routes.get(auth.peer_address)
                    if existing is None or existing.closed:
                        self._routes[auth.peer_address] = conn
            auth.event.set()

    def on_close(self, conn: Connection, error: BaseException | None) -> None:
        auth = conn.context
        if not isinstance(auth, Auth):
            return
        auth.event.set()
        peer = auth.peer_address
        if not peer or not auth.done:
            return
        with self._lock:
            if self._routes.get(peer) is conn:
                del self._routes[peer]
        if not self._closed:
            for cb in list(self._peer_lost):
                try:
                    cb(peer, error)
                except Exception as exc:  # noqa: BLE001
                    print(f"tetrarch[{self.name}]: peer-lost handler failed: {exc!r}", file=sys.stderr)

    # -- dispatch -----------------------------------------------------------
    def dispatch(self, frames: list, conn: Connection | None) -> None:
        hdr = _wire.read_header(frames[0])
        kind = hdr[0]
        if kind == _wire.PORT:
            handler = self._ports.get(hdr[1])
            if handler is not None:
                handler(hdr, frames[1:])
        elif kind == _wire.CALL:
            actor = self.actors.get(hdr[1])
            if actor is not None:
                actor.deliver(hdr, frames[1:])
            else:
                why = self.stopped_actors.get(hdr[1]) or f"no actor {hdr[1]!r} in proc {self.name}"
                self._reply_later(hdr[3], hdr[4], hdr[5], _wire.DEAD, why)
        elif kind == _wire.SYS:
            service = self._services.get(hdr[1])
            if service is None:
                self._reply_later(hdr[3], hdr[4], 0, _wire.DEAD, f"no service {hdr[1]!r} in {self.name}")
            else:
                service(hdr, frames[1:], conn)

    def _reachable_now(self, address: str) -> bool:
        conn = self._routes.get(address)
        return (conn is not None and not conn.closed) or address == self.address

    def _reply_later(self, address: str | None, port: int | None, tag: int, status: int, value: Any) -> None:
        """:meth:`reply`, from a handler on the I/O thread (dials on a helper thread if needed)."""
        if address is None or port is None:
            return
        if self._reachable_now(address):
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

        if self._reachable_now(address):
            go()
        else:
            threading.Thread(target=go, daemon=True).start()

    # -- lifecycle ------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        with self._olock:
            self._closed = True
            self._ocond.notify()
        self._flusher.join(timeout=2.0)  # let queued messages go out first
        self._listener.close()
        with self._lock:
            conns = list(self._routes.values())
            self._routes.clear()
        for conn in conns:
            conn.close()
