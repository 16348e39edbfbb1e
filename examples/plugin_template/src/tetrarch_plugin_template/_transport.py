"""The ``threaded`` transport: TCP sockets, one reader thread per connection.

Small on purpose (no selector loop, no buffer pool), complete on purpose: it passes
``tetrarch.testing.transport.TransportConformance``. The wire: a message is a 4-byte
frame count, an 8-byte length per frame (network order), then the frames' bytes.

Threads: one accept thread per listener, one reader thread per connection. Those are
the transport's I/O threads: every handler callback runs on one of them, except
``on_open`` of a dialed connection, which runs in the thread that called ``connect``
(before the reader starts, so before any ``on_message``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import struct
import threading
from collections.abc import Sequence

from tetrarch.plugins import (
    Connection,
    ConnectionClosed,
    ConnectionHandler,
    Listener,
    Transport,
    TransportError,
)

__all__ = ["ThreadedTransport"]

_log = logging.getLogger("tetrarch_plugin_template")

_COUNT = struct.Struct("!I")
_LENGTH = struct.Struct("!Q")
#: Lengths read per recv at most, and the largest buffer allocated before its bytes
#: arrived: a peer that announces huge sizes and vanishes costs little memory.
_LENGTHS_PER_READ = 4096
_CHUNK = 64 << 20
_IOV_MAX = 1024
_JOIN_S = 5.0


def _parse(address: str) -> tuple[socket.AddressFamily, str, int]:
    """``tcp://host:port`` -> ``(family, host, port)``.

    Raises:
        ValueError: not a ``tcp://host:port`` address.
    """
    scheme, sep, rest = address.partition("://")
    host, colon, port = rest.rpartition(":")
    if scheme != "tcp" or not sep or not colon or not port.isdigit():
        raise ValueError(f"the threaded transport serves tcp://host:port addresses, not {address!r}")
    if host.startswith("["):
        return socket.AF_INET6, host.strip("[]"), int(port)
    return socket.AF_INET, host or "127.0.0.1", int(port)


def _format(family: int, host: str, port: int) -> str:
    return f"tcp://[{host}]:{port}" if family == socket.AF_INET6 else f"tcp://{host}:{port}"


class _Connection(Connection):
    def __init__(self, owner: ThreadedTransport, sock: socket.socket, handler: ConnectionHandler, peer: str) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._owner = owner
        self._sock = sock
        self._handler = handler
        self._peer = peer
        self._send_lock = threading.Lock()  # one message on the wire at a time; guards closing the fd
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, name=f"threaded-reader {peer}", daemon=True)

    # -- the interface ----------------------------------------------------------
    @property
    def peer(self) -> str:
        return self._peer

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, frames: Sequence[bytes | bytearray | memoryview]) -> None:
        """Send one message; frames go to the kernel as a list (``sendmsg``), never joined.

        Raises:
            ConnectionClosed: the connection is closed, or broke while sending.
        """
        views = [memoryview(f).cast("B") for f in frames]
        header = _COUNT.pack(len(views)) + b"".join(_LENGTH.pack(v.nbytes) for v in views)
        with self._send_lock:
            if self._closed:
                raise ConnectionClosed(f"connection to {self._peer} is closed")
            try:
                _send_all(self._sock, [memoryview(header), *views])
            except OSError as exc:
                self._shutdown()
                raise ConnectionClosed(f"connection to {self._peer} broke: {exc}") from exc

    def close(self) -> None:
        """Close; the reader thread then sees the end and runs ``on_close`` (once)."""
        self._shutdown()

    # -- internals ----------------------------------------------------------------
    def _start(self) -> None:
        self._owner._track(self)
        self._handler.on_open(self)
        self._reader.start()

    def _shutdown(self) -> None:
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reader (and a blocked sender)
        except OSError:
            pass

    def _recv_exact(self, size: int, *, at_boundary: bool = False) -> bytearray | None:
        buffer = bytearray(size)
        view, got = memoryview(buffer), 0
        while got < size:
            n = self._sock.recv_into(view[got:])
            if n == 0:
                if at_boundary and got == 0:
                    return None  # an orderly end between messages
                raise ConnectionError(f"{self._peer} closed the connection in the middle of a message")
            got += n
        return buffer

    def _read_message(self) -> list[memoryview] | None:
        head = self._recv_exact(_COUNT.size, at_boundary=True)
        if head is None:
            return None
        (count,) = _COUNT.unpack(head)
        limit = self.max_message_size
        if _COUNT.size + _LENGTH.size * count > limit:  # refused on the count alone
            raise TransportError(f"{self._peer} announced {count} frames: the header exceeds {limit} bytes")
        lengths: list[int] = []
        while len(lengths) < count:
            n = min(count - len(lengths), _LENGTHS_PER_READ)
            chunk = self._recv_exact(_LENGTH.size * n)
            assert chunk is not None
            lengths.extend(struct.unpack(f"!{n}Q", chunk))
        if sum(lengths) > limit:
            raise TransportError(f"{self._peer} sent a message of {sum(lengths)} bytes; the limit is {limit}")
        return [memoryview(self._recv_frame(size)) for size in lengths]

    def _recv_frame(self, size: int) -> bytes | bytearray:
        if size <= _CHUNK:
            frame = self._recv_exact(size)
            assert frame is not None
            return frame
        parts = []  # a huge frame is allocated as it arrives, not as it is announced
        for start in range(0, size, _CHUNK):
            parts.append(self._recv_exact(min(_CHUNK, size - start)))
        return b"".join(p for p in parts if p is not None)

    def _read_loop(self) -> None:
        error: BaseException | None = None
        try:
            while (frames := self._read_message()) is not None:
                self._handler.on_message(self, frames)
        except (OSError, TransportError) as exc:
            error = None if self._closed else exc  # our own close is an orderly end
        finally:
            self._shutdown()
            with self._send_lock:  # no sender is inside sendmsg when the fd number is released
                self._sock.close()
            self._owner._untrack(self)
            self._handler.on_close(self, error)


def _send_all(sock: socket.socket, buffers: list[memoryview]) -> None:
    pending = [b for b in buffers if b.nbytes]
    while pending:
        sent = sock.sendmsg(pending[:_IOV_MAX], [], socket.MSG_NOSIGNAL)
        while sent:
            if sent >= pending[0].nbytes:
                sent -= pending.pop(0).nbytes
            else:
                pending[0], sent = pending[0][sent:], 0


class _Listener(Listener):
    def __init__(self, owner: ThreadedTransport, sock: socket.socket, handler: ConnectionHandler) -> None:
        self._owner = owner
        self._sock = sock
        self._handler = handler
        host, port = sock.getsockname()[:2]
        self._address = _format(sock.family, host, port)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name=f"threaded-accept {self._address}",
                                        daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return self._address

    def _accept_loop(self) -> None:
        """Accept until closed, within the kernel's connection cap (``Transport.limit_unauthenticated``).

        A connection past ``preauth_limits.connection_limit()`` is closed at once; when the
        process has no descriptor left, a spare one is given up to accept and close the
        waiting peer (instead of a busy loop, or an accept thread that ends).
        """
        spare: int | None = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        refused = 0
        try:
            while not self._closed.is_set():
                try:
                    sock, peer = self._sock.accept()
                except OSError as exc:
                    if self._closed.is_set():
                        return
                    if exc.errno in (errno.EMFILE, errno.ENFILE) and spare is not None:
                        os.close(spare)
                        with contextlib.suppress(OSError):
                            self._sock.accept()[0].close()
                        spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
                    elif exc.errno not in (errno.ECONNABORTED, errno.EINTR, errno.EPROTO):
                        _log.error("%s: accept failed, no longer accepting: %s", self._address, exc)
                        return
                    refused += 1
                    continue
                if self._owner._connection_count() >= self._owner.preauth_limits.connection_limit():
                    sock.close()
                    refused += 1
                    if refused % 1000 == 1:
                        _log.warning("%s: refused a connection: the connection cap (%d) is reached (%d refused)",
                                     self._address, self._owner.preauth_limits.connection_limit(), refused)
                    continue
                _Connection(self._owner, sock, self._handler, f"{peer[0]}:{peer[1]}")._start()
        finally:
            if spare is not None:
                os.close(spare)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # Linux: wakes the thread blocked in accept()
        except OSError:
            pass
        self._sock.close()
        if threading.current_thread() is not self._thread:
            self._thread.join(_JOIN_S)
        self._owner._untrack(self)


class ThreadedTransport(Transport):
    """TCP, one reader thread per connection (backend ``threaded``, scheme ``tcp``)."""

    name = "threaded"
    schemes = ("tcp",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[_Connection | _Listener] = set()

    def listen(self, address: str, handler: ConnectionHandler) -> Listener:
        """Bind and listen on ``tcp://host:port`` (port 0 picks one).

        Raises:
            ValueError: not a ``tcp://host:port`` address.
            TransportError: the address cannot be bound.
        """
        family, host, port = _parse(address)
        try:
            sock = socket.create_server((host, port), family=family, backlog=128)
        except OSError as exc:
            raise TransportError(f"cannot listen on {address}: {exc}") from exc
        listener = _Listener(self, sock, handler)
        self._track(listener)
        return listener

    def connect(self, address: str, handler: ConnectionHandler, timeout: float = 10.0) -> Connection:
        """Dial ``tcp://host:port``; ``on_open`` has run when this returns.

        Raises:
            ValueError: not a ``tcp://host:port`` address.
            TransportError: nobody listens there, or the dial timed out.
        """
        _family, host, port = _parse(address)
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise TransportError(f"cannot connect to {address}: {exc}") from exc
        sock.settimeout(None)
        conn = _Connection(self, sock, handler, address)
        conn._start()
        return conn

    def default_address(self, *, spans_hosts: bool) -> str:
        return f"tcp://{socket.gethostname() if spans_hosts else '127.0.0.1'}:0"

    def close(self) -> None:
        """Close every listener and connection this transport opened. Idempotent."""
        with self._lock:
            items, self._open = list(self._open), set()
        for item in items:
            item.close()

    def _track(self, item: _Connection | _Listener) -> None:
        with self._lock:
            self._open.add(item)

    def _untrack(self, item: _Connection | _Listener) -> None:
        with self._lock:
            self._open.discard(item)

    def _connection_count(self) -> int:
        with self._lock:
            return sum(isinstance(item, _Connection) for item in self._open)
