"""Builtin transport: ``tcp://host:port`` and ``ipc://path`` (Unix sockets).

Wire format of one message: ``!I`` frame count, ``!Q`` per frame length, then the
frames back to back. The header counts toward ``max_message_size`` too: a count whose
header (``4 + 8 * count`` bytes) exceeds it closes the connection as soon as it is read.
Writers hand the header and the frames to ``sendmsg`` as a list (vectored I/O), so a
large tensor is never concatenated into a bigger buffer. One I/O thread per transport
owns an epoll selector and does all reads; any thread may write (non-blocking socket,
waiting for writability when the kernel buffer is full). A message of at least
``_DIRECT_MIN`` bytes is read straight into buffers allocated for it, each large frame
into one of its own backed by a fresh ``bytes`` object (:func:`frame_buffer`), so the
receiver can adopt a ``bytes`` payload without a copy, or, on an authenticated connection
whose message's lead names them, into the kernel's receive sinks
(:data:`~tetrarch._transport._base.SinkResolver`): an RDMA read's chunk lands in the
destination tensor.

``ipc://@name`` uses Linux's abstract socket namespace (no file to clean up), and is
what :meth:`IpcTransport.default_address` hands out on Linux.
"""

from __future__ import annotations

import errno
import os
import secrets
import select
import socket
import struct
import sys
import threading
from collections.abc import Sequence
from typing import cast

from .._log import get_logger
from ._backoff import Backoff
from ._base import Buffer, Connection, ConnectionClosed, ConnectionHandler, Listener, Transport, TransportError
from ._framing import MAX_FRAMES as _MAX_FRAMES
from ._framing import OWN_MIN as _OWN_MIN
from ._framing import append_message as _frame
from ._framing import consume as _consume
from ._framing import nbytes
from ._framing import receive_buffers as _receive_buffers
from ._framing import resolve_sinks as _resolve_sinks
from ._framing import sink_lead as _sink_lead
from ._framing import sizes_struct as _sizes_struct
from ._limits import PreAuthLimits
from ._loop import IoLoop
from ._route import advertised_host

__all__ = ["IpcTransport", "SocketTransport", "TcpTransport", "parse_address"]

_log = get_logger("transport")

_COUNT = struct.Struct("!I")
_IOV_MAX = 1000
_RECV_CHUNK = 1 << 18
_DIRECT_READS = 8  # reads of one large message per readiness event (then other sockets get their turn)
_SHARE_MAX = 1 << 16  # small messages of a read of at most this many bytes share one copy (_parse)
_DIRECT_MIN = 1 << 20  # a message at least this big is received straight into its own buffers
# (each frame of at least ``_framing.OWN_MIN`` bytes into a buffer of its own)


def parse_address(address: str) -> tuple[str, object]:
    """Split ``tcp://h:p`` / ``ipc://path`` into ``(scheme, sockaddr)``.

    Raises:
        ValueError: malformed address or unknown scheme.
    """
    scheme, sep, rest = address.partition("://")
    if not sep:
        raise ValueError(f"address {address!r} has no scheme; expected tcp://host:port or ipc://path")
    if scheme == "tcp":
        host, colon, port = rest.rpartition(":")
        if not colon or not port.isdigit():
            raise ValueError(f"tcp address {address!r} must look like tcp://host:port")
        return scheme, (host.strip("[]") or "127.0.0.1", int(port))
    if scheme == "ipc":
        if not rest:
            raise ValueError(f"ipc address {address!r} needs a path, e.g. ipc:///tmp/x.sock or ipc://@name")
        return scheme, ("\0" + rest[1:]) if rest.startswith("@") else rest
    raise ValueError(f"address {address!r}: scheme {scheme!r} is not served by the builtin transport (tcp, ipc)")


def _open_spare() -> int | None:
    """A descriptor held in reserve for accepting (and closing) a connection when none is left."""
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


class _SocketConnection(Connection):
    supports_sinks = True

    def __init__(self, io: _IoLoop, sock: socket.socket, handler: ConnectionHandler, peer: str) -> None:
        self._io = io
        self._sock = sock
        self._fd = sock.fileno()
        self._handler = handler
        self._peer = peer
        self._wlock = threading.Lock()
        self._closed = False
        self._close_reported = False
        self.max_message_size = 1 << 62
        self.context = None
        self.sinks = None
        # receive state (I/O thread only)
        self._rbuf = bytearray()
        self._direct: tuple[list[memoryview], list[memoryview]] | None = None  # (frames, left to fill)

    # -- Connection API -------------------------------------------------
    @property
    def peer(self) -> str:
        return self._peer

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, frames: Sequence[Buffer]) -> None:
        bufs: list[Buffer] = []
        self._write(bufs, _frame(bufs, frames))

    def send_many(self, messages: Sequence[Sequence[Buffer]]) -> None:
        bufs: list[Buffer] = []
        total = 0
        for frames in messages:
            total += _frame(bufs, frames)
        self._write(bufs, total)

    def _write(self, bufs: list[Buffer], total: int) -> None:
        """Write ``bufs`` (``total`` bytes in all) in order, whole."""
        sock = self._sock
        with self._wlock:
            if self._closed:
                raise ConnectionClosed(f"connection to {self._peer} is closed")
            while bufs:
                try:
                    sent = sock.sendmsg(bufs[:_IOV_MAX] if len(bufs) > _IOV_MAX else bufs)
                except BlockingIOError:
                    self._wait_writable()
                    continue
                except OSError as exc:
                    self.close()
                    raise ConnectionClosed(f"connection to {self._peer} broke: {exc}") from exc
                if sent == total:  # the common case: everything went out at once
                    return
                total -= sent
                # drop what went out
                i = 0
                while i < len(bufs) and sent >= nbytes(bufs[i]):
                    sent -= nbytes(bufs[i])
                    i += 1
                del bufs[:i]
                if sent:
                    bufs[0] = memoryview(bufs[0]).cast("B")[sent:]

    def _wait_writable(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLOUT)
        while not self._closed:
            if poller.poll(200):
                return
        raise ConnectionClosed(f"connection to {self._peer} is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._io.call(lambda: self._io.drop(self, None))

    # -- receive side (I/O thread) ----------------------------------------
    def on_error(self, exc: BaseException) -> None:
        """``on_readable`` raised (a handler bug): this connection closes, others carry on."""
        self._io.drop(self, exc)

    def on_readable(self) -> None:
        if self._direct is not None:
            self._fill_direct()
            return
        scratch = self._io.scratch
        try:
            # Into the loop's one reusable buffer: ``recv(N)`` allocated N bytes per read, which
            # for 256 KiB is an mmap, an mremap and an munmap (and a page fault) per message.
            n = self._sock.recv_into(scratch)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._io.drop(self, exc)
            return
        if not n:
            self._io.drop(self, None)
            return
        buf = self._rbuf
        if not buf:  # the usual case: parsed where it was read, only an unfinished message is kept
            pos = self._parse(scratch, n)
            if pos < n and not self._closed and self._direct is None:
                self._rbuf += scratch[pos:n]
            return
        buf += scratch[:n]
        with memoryview(buf) as view:
            pos = self._parse(view, len(buf))
        if pos:
            del buf[:pos]

    def _fill_direct(self) -> None:
        frames, targets = self._direct  # type: ignore[misc]
        for _ in range(_DIRECT_READS):  # the rest of a large message is usually there already
            try:
                n = self._sock.recvmsg_into(targets[:_IOV_MAX])[0]
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._io.drop(self, exc)
                return
            if n == 0:
                self._io.drop(self, None)
                return
            _consume(targets, n)
            if not targets:
                self._direct = None
                self._handler.on_message(self, frames)
                return

    def _parse(self, src: memoryview, end: int) -> int:
        """Deliver the whole messages at the start of ``src[:end]``; return how many bytes they took
        (all of it when a large message's rest is to be received into its own buffers).

        Small messages of one read share one ``bytes`` copy (their frames are views of it): a
        copy, a buffer and a memoryview per message were a fair part of a small reply's cost
        and of what the garbage collector walks while many replies wait to be read.
        """
        pos = 0
        shared: memoryview | None = None
        base = 0  # where shared starts in src
        while end - pos >= 4 and not self._closed:
            (count,) = _COUNT.unpack_from(src, pos)
            hlen = 4 + 8 * count
            if count > _MAX_FRAMES or hlen > self.max_message_size:
                # Refused on the count alone: the lengths are never buffered (before
                # authentication a 65 536-frame header would hold 512 KiB per connection).
                self._io.drop(
                    self,
                    TransportError(f"peer {self._peer} announced {count} frames (a {hlen}-byte header; "
                                   f"limits {_MAX_FRAMES} frames, {self.max_message_size} bytes)"),
                )
                return end
            if end - pos < hlen:
                break
            sizes = _sizes_struct(count).unpack_from(src, pos + 4)
            total = sum(sizes)
            if total > self.max_message_size:
                self._io.drop(
                    self,
                    TransportError(f"peer {self._peer} sent a {total}-byte message (limit {self.max_message_size})"),
                )
                return end
            start = pos + hlen
            if end - start >= total:
                pos = start + total
                if total >= _OWN_MIN or end - start > _SHARE_MAX:  # a copy of its own: nothing else pins it
                    body = memoryview(src[start:pos].tobytes())
                    at = 0
                else:
                    if shared is None:
                        shared = memoryview(src[start:end].tobytes())
                        base = start
                    body = shared
                    at = start - base
                frames = []
                for n in sizes:
                    frames.append(body[at : at + n])
                    at += n
                self._handler.on_message(self, frames)
                continue
            if total >= _DIRECT_MIN and self._receive_direct(list(sizes), src[start:end]):
                return end
            break
        return pos

    def _receive_direct(self, sizes: list[int], have: memoryview) -> bool:
        """Receive a large message's rest straight into its own buffers (or its sinks), ``have`` (what
        arrived of it) first; False: not yet, its lead must arrive first (``have`` is left as it is)."""
        sinks, resolver = None, self.sinks
        lead = _sink_lead(sizes) if resolver is not None else None
        if resolver is not None and lead is not None:
            need = sum(sizes[:lead])
            if len(have) < need:
                return False  # the lead (under OWN_MIN bytes) says where the rest goes: wait for it
            sinks = _resolve_sinks(resolver, have[:need].tobytes(), sizes, lead)
        frames, targets = _receive_buffers(sizes, sinks)
        done = 0
        while done < len(have):  # what already arrived goes in first
            k = min(targets[0].nbytes, len(have) - done)
            targets[0][:k] = have[done : done + k]
            done += k
            _consume(targets, k)
        self._direct = (frames, targets)
        return True


class _SocketListener(Listener):
    """Accepts connections; keeps the process under its connection cap and never spins on EMFILE.

    A connection accepted while the loop already holds ``limits.connection_limit()`` is
    closed at once (logged: the first, then one line per 1000). Should the process run
    out of descriptors anyway, a spare descriptor kept for the purpose is given up to
    accept and close the waiting connection, so the level-triggered listener does not
    turn the I/O thread into a busy loop and the peer learns it was refused.
    """

    def __init__(self, io: _IoLoop, sock: socket.socket, address: str, handler: ConnectionHandler, path: str | None,
                 limits: PreAuthLimits):
        self._io = io
        self._sock = sock
        self._address = address
        self._handler = handler
        self._path = path
        self._closed = False
        self._limits = limits
        self._refused = 0
        self._spare: int | None = _open_spare()

    @property
    def address(self) -> str:
        return self._address

    def on_error(self, exc: BaseException) -> None:
        """``on_readable`` raised: the listener keeps listening (the error was logged)."""

    def on_readable(self) -> None:
        cap = self._limits.connection_limit()
        while True:
            try:
                sock, peer = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self._shed_without_descriptors(exc)
                return
            if self._io.connection_count() >= cap:
                sock.close()
                self._refuse(f"this process holds {cap} connections already (half its open-file limit)")
                continue
            sock.setblocking(False)
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            desc = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else f"{self._address} (accepted)"
            conn = _SocketConnection(self._io, sock, self._handler, desc)
            try:
                self._handler.on_open(conn)
            except Exception:  # noqa: BLE001 - a faulty handler must not kill the I/O thread
                sock.close()
                continue
            self._io.register(conn)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._io.call(self._close_now)

    def _refuse(self, why: str) -> None:
        self._refused += 1
        if self._refused % 1000 == 1:
            _log.warning("%s: refused a new connection: %s (%d refused so far)", self._address, why, self._refused)

    def _shed_without_descriptors(self, exc: OSError) -> None:
        """accept() found no descriptor: accept and close one waiting connection with the spare."""
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
            try:
                sock, _peer = self._sock.accept()
                sock.close()
            except OSError:
                pass
            self._spare = _open_spare()
        self._refuse(f"no file descriptor left ({exc.strerror})")

    def _close_now(self) -> None:
        self._io.unregister(self._sock)
        self._sock.close()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
        if self._path:
            try:
                os.unlink(self._path)
            except OSError:
                pass


class _IoLoop(IoLoop):
    """The core I/O loop, plus the bookkeeping of the socket connections it reads."""

    def __init__(self, name: str) -> None:
        self._conns: set[_SocketConnection] = set()
        #: What every connection reads into (one thread reads for the loop at a time), then appends to its own buffer.
        self.scratch = memoryview(bytearray(_RECV_CHUNK))
        super().__init__(name)

    def register(self, obj: _SocketConnection | _SocketListener) -> None:
        def do() -> None:
            if isinstance(obj, _SocketConnection):
                if obj.closed:
                    self._report_close(obj, None)
                    obj._sock.close()
                    return
                self._conns.add(obj)
            self.watch(obj._sock, obj)

        self.call(do)

    def connection_count(self) -> int:
        """Connections open on this loop, accepted and dialed (reading thread)."""
        return len(self._conns)

    def unregister(self, sock: socket.socket) -> None:
        self.unwatch(sock)

    def drop(self, conn: _SocketConnection, error: BaseException | None) -> None:
        """Close ``conn`` for good (I/O thread) and report it once."""
        conn._closed = True
        # Release what was received but not delivered: handlers may hold a closed
        # connection for a while, and a dropped peer's bytes must not stay with it.
        conn._rbuf = bytearray()
        conn._direct = None
        if conn in self._conns:
            self._conns.discard(conn)
            self.unregister(conn._sock)
            try:
                conn._sock.close()
            except OSError:
                pass
        self._report_close(conn, error)

    @staticmethod
    def _report_close(conn: _SocketConnection, error: BaseException | None) -> None:
        if conn._close_reported:
            return
        conn._close_reported = True
        try:
            conn._handler.on_close(conn, error)
        except Exception:  # noqa: BLE001
            pass

    def shut(self) -> None:
        """Close every connection (reporting each), then end the thread; returns at once."""

        def drop_all() -> None:
            for conn in list(self._conns):
                self.drop(conn, None)

        self.stop(drop_all, wait=0)


class SocketTransport(Transport):
    """Shared implementation of the builtin tcp and ipc transports."""

    def __init__(self) -> None:
        self._io: _IoLoop | None = None
        self._lock = threading.Lock()

    def _loop(self) -> _IoLoop:
        with self._lock:
            if self._io is None:
                self._io = _IoLoop(self.name)
            return self._io

    def leader_loop(self) -> IoLoop:
        return self._loop()

    def _check(self, address: str) -> tuple[str, object]:
        scheme, sockaddr = parse_address(address)
        if scheme not in self.schemes:
            raise ValueError(f"the {self.name} transport serves {', '.join(self.schemes)} addresses, not {address!r}")
        return scheme, sockaddr

    def listen(self, address: str, handler: ConnectionHandler) -> Listener:
        scheme, sockaddr = self._check(address)
        io = self._loop()
        path = None
        if scheme == "tcp":
            host, _port = cast("tuple[str, int]", sockaddr)
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            if not str(sockaddr).startswith("\0"):
                path = str(sockaddr)
        try:
            sock.bind(sockaddr)  # type: ignore[arg-type]
            sock.listen(socket.SOMAXCONN)
        except OSError as exc:
            sock.close()
            raise TransportError(f"cannot listen on {address}: {exc}") from exc
        sock.setblocking(False)
        if scheme == "tcp":
            host, port = sock.getsockname()[:2]
            host = advertised_host(host)
            real = f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"
        else:
            real = address
        listener = _SocketListener(io, sock, real, handler, path, self.preauth_limits)
        io.register(listener)
        return listener

    def connect(self, address: str, handler: ConnectionHandler, timeout: float = 10.0) -> Connection:
        scheme, sockaddr = self._check(address)
        io = self._loop()
        if scheme == "tcp":
            try:
                sock = socket.create_connection(sockaddr, timeout=timeout)  # type: ignore[arg-type]
            except OSError as exc:
                raise TransportError(f"cannot connect to {address}: {exc}") from exc
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            sock = _connect_unix(address, sockaddr, timeout)
        sock.setblocking(False)
        conn = _SocketConnection(io, sock, handler, address)
        handler.on_open(conn)
        io.register(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            if self._io is not None:
                self._io.shut()
                self._io = None


def _connect_unix(address: str, sockaddr: object, timeout: float) -> socket.socket:
    """Dial a Unix socket, retrying while its listen backlog is full, for up to ``timeout`` s.

    A Unix-socket ``connect`` with a timeout fails with EAGAIN at once when the listener's
    backlog is full (a burst of dials, or a flood of strangers), where TCP would retry the
    SYN by itself. Retries back off from 1 ms to 50 ms.

    Raises:
        TransportError: nobody listens there, or the backlog stayed full for ``timeout`` s.
    """
    backoff = Backoff(timeout)
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(max(backoff.left(), 0.001))
        try:
            sock.connect(sockaddr)  # type: ignore[arg-type]
            return sock
        except BlockingIOError as exc:  # EAGAIN: the backlog is full
            sock.close()
            if not backoff.wait():
                raise TransportError(f"cannot connect to {address}: its listen backlog stayed full for "
                                     f"{timeout:g} s (the listening process is flooded or stuck)") from exc
        except OSError as exc:
            sock.close()
            raise TransportError(f"cannot connect to {address}: {exc}") from exc


class TcpTransport(SocketTransport):
    """TCP sockets with TCP_NODELAY; loopback unless the allocation spans hosts."""

    name = "tcp"
    schemes = ("tcp",)

    def default_address(self, *, spans_hosts: bool) -> str:
        return "tcp://0.0.0.0:0" if spans_hosts else "tcp://127.0.0.1:0"


class IpcTransport(SocketTransport):
    """Unix domain sockets (abstract namespace on Linux: nothing left on disk)."""

    name = "ipc"
    schemes = ("ipc",)

    def default_address(self, *, spans_hosts: bool) -> str:
        if spans_hosts:
            raise TransportError("the ipc transport cannot span hosts; use tcp (TETRARCH_TRANSPORT=tcp)")
        name = f"tetrarch-{os.getpid()}-{secrets.token_hex(6)}"
        if sys.platform.startswith("linux"):
            return f"ipc://@{name}"
        base = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tetrarch-{os.getuid()}")
        os.makedirs(base, mode=0o700, exist_ok=True)
        return f"ipc://{os.path.join(base, name)}.sock"

