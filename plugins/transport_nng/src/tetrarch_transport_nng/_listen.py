"""The nng listener: a plain listening socket this plugin accepts on, one ``pair0`` socket per connection.

nng's own listeners accept in nng's threads and keep a connection that has not finished
the 8-byte SP header exchange for a built-in 10 s, with no callback and no cap; under
EMFILE they retry ``accept`` every 10 ms. So the listening socket is a Python one (TCP,
a Unix path or an abstract name) watched by the transport's I/O loop, and each accepted
descriptor is handed (``_conn.hand_over``) to a fresh ``pair0`` socket of its own:

* ``accept`` takes a :class:`~._gate.Ticket` of the transport's gate: refused (closed at
  once, logged) while open connections fill ``limits.connection_limit()`` (the default
  cap counts their descriptors: ``_gate``), the oldest waiting one closed past
  ``limits.max_pending``, closed if nng has not added its pipe within ``limits.timeout``.
  A stranger that sends nothing costs one descriptor and an idle nng socket until then.
* Before its pipe is added nng reads only the 8-byte header; between the pipe's arrival
  and ``on_open`` (on the I/O thread right after) it holds at most two ``CHUNK``-sized
  messages (``recv_buffer_size`` 1 plus the one its pipe reads): about ``limits.max_bytes``.
  From ``on_open`` on the kernel bounds the peer until it authenticates.
* Out of descriptors (EMFILE), a spare descriptor kept for the purpose is given up to
  accept and close the waiting connection (the peer learns it was refused, and the
  level-triggered loop does not spin); should even that fail, accepting pauses for
  :data:`_PAUSE` s.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import stat
from typing import TYPE_CHECKING, Any

import pynng

from tetrarch.plugins import (
    ConnectionHandler,
    Listener,
    QualifiedAddress,
    TransportError,
    advertised_host,
)

from ._conn import RECV_BUFFER, NngConnection, hand_over, pair_socket

if TYPE_CHECKING:
    from collections.abc import Callable

    from tetrarch.plugins import IoLoop

    from ._gate import Gate, Ticket

__all__ = ["NngListener"]

#: Connections one wake-up of the listener accepts before others get their turn.
_ACCEPT_BATCH = 64
#: Seconds accepting pauses when not even the spare descriptor could make room.
_PAUSE = 0.1
#: Messages nng queues on a connection's socket until it opens (its pipe reads one more).
_UNOPENED_RECV_BUFFER = 1


def _spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def bind(where: QualifiedAddress) -> tuple[socket.socket, str, str | None]:
    """A listening socket at ``where``: the socket, the address peers dial, and the path to remove at close.

    Raises:
        TransportError: the address cannot be bound (in use, not resolvable, no permission).
    """
    path = None
    sockaddr: Any
    try:
        if where.scheme == "tcp":
            infos = socket.getaddrinfo(where.host, where.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            family, _, _, _, sockaddr = infos[0]
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            if where.path.startswith("@"):
                sockaddr = "\0" + where.path[1:]
            else:
                sockaddr = path = where.path
    except OSError as exc:
        raise TransportError(f"cannot listen on {where.native()}: {exc}") from exc
    try:
        try:
            sock.bind(sockaddr)
        except OSError as exc:
            if path is None or exc.errno != errno.EADDRINUSE or not _stale(path):
                raise
            os.unlink(path)  # a socket file nobody listens on any more (as nng's own ipc listener does)
            sock.bind(sockaddr)
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise TransportError(f"cannot listen on {where.native()}: {exc}") from exc
    if where.scheme == "tcp":
        host, port = sock.getsockname()[:2]
        host = advertised_host(host)
        address = f"nng+tcp://[{host}]:{port}" if ":" in host else f"nng+tcp://{host}:{port}"
    else:
        address = f"nng+ipc://{where.path}"
    return sock, address, path


def _stale(path: str) -> bool:
    """Whether ``path`` is a Unix socket file that nobody listens on."""
    try:
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return False
    except OSError:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
    return False


class _Accepted(NngConnection):
    """The listener's side of one connection: opens when nng adds its pipe (the SP header exchange is done)."""

    def __init__(self, loop: IoLoop, sock: pynng.Pair0, handler: ConnectionHandler, peer: str,
                 owner: NngListener, ticket: Ticket) -> None:
        super().__init__(loop, sock, handler, peer)
        self._owner = owner
        self._gate = owner.gate
        self._ticket: Ticket | None = ticket
        sock.add_post_pipe_connect_cb(self._pipe_added)
        sock.add_post_pipe_remove_cb(self._pipe_removed)

    # nng threads
    def _pipe_added(self, _pipe: pynng.Pipe) -> None:
        self._loop.call(self._open)

    def _pipe_removed(self, _pipe: pynng.Pipe) -> None:
        self.pipe_alive = False
        self._loop.call(self.pipe_gone)

    # I/O thread
    def expire(self) -> None:
        """The gate closes this (past its deadline, or the oldest past a cap) unless it opened."""
        if self._ticket is not None and not self._closed:
            self.drop_unopened()

    def drop_unopened(self) -> None:
        """Close without telling the handler (it never heard of this connection)."""
        self._owner.pending.pop(self, None)
        self._gate.leave(self._ticket)
        self._ticket = None
        self._close_reported = True
        self.drop(None)

    def drop(self, error: BaseException | None) -> None:
        super().drop(error)
        self._gate.released(self)

    def _open(self) -> None:
        if self._closed:
            return
        if not self._gate.open(self._ticket, self):  # closed by the gate meanwhile, or no room
            self.drop_unopened()
            return
        self._ticket = None
        self._owner.pending.pop(self, None)
        try:
            self._sock.recv_buffer_size = RECV_BUFFER
            self._handler.on_open(self)
        except Exception:  # noqa: BLE001 - a faulty handler must not kill the I/O thread
            self.drop_unopened()
            return
        self.start()


class NngListener(Listener):
    """Accepts on a listening socket (I/O thread) and hands each connection to nng.

    Args:
        loop: the transport's I/O loop (accepts, opens and closes run on it).
        gate: the transport's bounds on connections before they open.
        track: called with every connection made, so the transport's ``close`` closes it.
    """

    def __init__(self, loop: IoLoop, gate: Gate, track: Callable[[NngConnection], None],
                 where: QualifiedAddress, handler: ConnectionHandler) -> None:
        self._loop = loop
        self.gate = gate
        self._track = track
        self._handler = handler
        self._tcp = where.scheme == "tcp"
        self._sock, self._address, self._path = bind(where)
        self._inode = os.stat(self._path).st_ino if self._path else None
        self._closed = False
        self._watching = False
        self._spare: int | None = _spare()
        self._count = itertools.count(1)
        self.pending: dict[_Accepted, None] = {}  # accepted, not open yet
        self._loop.call(self._watch)

    @property
    def address(self) -> str:
        return self._address

    def _watch(self) -> None:
        if not self._closed and not self._watching:
            self._watching = True
            self._loop.watch(self._sock, self)

    # I/O thread
    def on_error(self, exc: BaseException) -> None:
        """``on_readable`` raised: keep listening (the loop logged it)."""

    def on_readable(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            if self._closed:
                return
            try:
                conn, addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno == errno.ECONNABORTED:
                    continue
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._no_descriptor(exc)
                return
            self._admit(conn, addr)

    def _admit(self, conn: socket.socket, addr: Any) -> None:
        n = next(self._count)
        peer = f"{addr[0]}:{addr[1]}" if self._tcp else f"{self._address} (accepted #{n})"
        ticket = self.gate.admit(peer)
        if ticket is None:  # open connections fill the limit (the gate logged it)
            conn.close()
            return
        try:
            if self._tcp:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            conn.setblocking(False)
        except OSError:  # the peer left already
            conn.close()
            self.gate.leave(ticket)
            return
        sock = pair_socket(_UNOPENED_RECV_BUFFER)
        accepted = _Accepted(self._loop, sock, self._handler, peer, self, ticket)
        ticket.closer = accepted.expire
        self._track(accepted)
        self.pending[accepted] = None
        try:
            hand_over(sock, conn.detach())
        except OSError as exc:
            accepted.drop_unopened()
            self.gate.refused(f"{peer}: {exc}")
            return

    def _no_descriptor(self, exc: OSError) -> None:
        """``accept`` found no descriptor: accept and close one waiting connection with the spare."""
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
            try:
                self._sock.accept()[0].close()
            except OSError:
                pass
            self._spare = _spare()
        if self._spare is None:  # not even that: stop accepting for a moment (the loop must not spin)
            self._watching = False
            self._loop.unwatch(self._sock)
            self._loop.later(_PAUSE, self._watch)
        self.gate.refused(f"{self._address}: no file descriptor left to accept with ({exc.strerror})")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call(self.close_now)

    def close_now(self) -> None:
        """Stop listening (I/O thread); connections not open yet go too. Idempotent."""
        self._closed = True
        if self._watching:
            self._watching = False
            self._loop.unwatch(self._sock)
        if self._sock.fileno() >= 0:
            self._sock.close()
            if self._path is not None:
                try:
                    if os.stat(self._path).st_ino == self._inode:  # ours, not a later listener's
                        os.unlink(self._path)
                except OSError:
                    pass
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
        for conn in list(self.pending):
            conn.drop_unopened()

