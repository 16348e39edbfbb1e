"""A run's failure line: when one rank fails, every other rank of the run learns it at once.

torch.distributed has no way out of a collective whose peer is gone or will never arrive:
gloo raises only when a peer's socket closes, NCCL waits for its watchdog (minutes), and a
rank waiting for a store key or a barrier waits for the store's timeout. So each run of
``SPMDActor.main`` gets a *hub* (a thread in rank 0's proc, one TCP socket per rank) and every
rank a *link* to it:

* a rank whose program raises (or exits with a status other than 0) sends ``FAIL`` and waits
  for the hub's verdict: ``FIRST`` (this is the run's first failure) or ``ABORT`` (another
  rank failed first: this failure is a consequence of that one);
* a rank whose process dies closes its socket (the kernel does it): the hub takes that as
  the rank's failure;
* at the first failure the hub sends ``ABORT <rank> <cause>`` to every other rank still
  running; a link whose hub vanishes (rank 0's process died) aborts too.

What a rank does on ``ABORT`` is :class:`tetrarch._spmd._actor`'s business (abort an NCCL
group, then stop the process if the program is still blocked).

Wire format: UTF-8 lines, each at most :data:`MAX_LINE` bytes. A connection must say
``HELLO <token> <rank>`` within :data:`HELLO_TIMEOUT` seconds; the token is random per run and
travels through the run's rendezvous store, so a stranger who cannot read that store cannot
join; at most ``2 * world_size`` connections are held. Nothing received is unpickled.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["HELLO_TIMEOUT", "MAX_LINE", "Hub", "Link", "Verdict"]

#: The longest line either side accepts (a cause carries a traceback, cut to fit).
MAX_LINE = 32 * 1024
#: Seconds a new connection has to say hello before it is closed.
HELLO_TIMEOUT = 10.0
#: Seconds a failing rank waits for the hub's verdict (the hub answers in microseconds; this
#: bound only matters when rank 0's proc is gone, and then the rank's own failure is first).
VERDICT_TIMEOUT = 5.0
_GONE = "its process is gone (killed, crashed or out of memory)"


def _line(*words: str) -> bytes:
    text = " ".join(words).replace("\n", "\\n")
    data = text.encode("utf-8", "replace")[:MAX_LINE - 1]
    return data + b"\n"


def _unescape(text: str) -> str:
    return text.replace("\\n", "\n")


def _take_lines(buf: bytes) -> tuple[list[str], bytes]:
    """The complete lines in ``buf`` (decoded) and what follows the last one."""
    *lines, rest = buf.split(b"\n")
    return [raw.decode("utf-8", "replace") for raw in lines], rest


@dataclass
class Verdict:
    """The hub's answer to a rank's ``FAIL``: whether it is the run's first failure.

    ``rank``/``cause`` name the first failure; ``ended`` lists the ranks that had already
    ended their program normally when it happened (a rank that ended early can leave the
    others in a collective it will never join).
    """

    first: bool
    rank: int
    cause: str
    ended: tuple[int, ...] = ()


class _Conn:
    __slots__ = ("sock", "buf", "rank", "done", "deadline")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.rank = -1
        self.done = False
        self.deadline = time.monotonic() + HELLO_TIMEOUT


class Hub:
    """The failure line's centre for one run (rank 0's proc): a listening socket and one thread."""

    def __init__(self, host: str, world_size: int) -> None:
        self.token = secrets.token_hex(16)
        self._world = world_size
        self._lsock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind((host, 0))
        self._lsock.listen(2 * world_size)
        self._lsock.setblocking(False)
        self.port: int = self._lsock.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._lsock, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._conns: dict[int, _Conn] = {}  # fileno -> connection
        self._first: tuple[int, str] | None = None
        self._ended: list[int] = []
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="tetrarch-spmd-hub", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread and close every socket (idempotent)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(5.0)

    def _serve(self) -> None:
        try:
            while not self._closed:
                now = time.monotonic()
                waits = [c.deadline - now for c in self._conns.values() if c.rank < 0]
                for key, _ in self._sel.select(max(0.0, min(waits)) if waits else None):
                    if key.data == "wake":
                        continue
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.data)
                now = time.monotonic()
                for conn in [c for c in self._conns.values() if c.rank < 0 and c.deadline <= now]:
                    self._drop(conn)
        finally:
            for conn in list(self._conns.values()):
                self._drop(conn)
            self._sel.close()
            for s in (self._lsock, self._wake_r, self._wake_w):
                s.close()

    def _accept(self) -> None:
        try:
            sock, _ = self._lsock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # out of descriptors: the connection waits in the backlog
            return
        if len(self._conns) >= 2 * self._world:
            sock.close()
            return
        sock.setblocking(False)
        conn = _Conn(sock)
        self._conns[sock.fileno()] = conn
        self._sel.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._eof(conn)
            return
        lines, conn.buf = _take_lines(conn.buf + data)
        for line in lines:
            if not self._handle(conn, line):
                return
        if len(conn.buf) >= MAX_LINE:
            self._drop(conn)

    def _handle(self, conn: _Conn, line: str) -> bool:
        """Act on one line; False when the connection was dropped."""
        word, _, rest = line.partition(" ")
        if conn.rank < 0:
            token, _, rank = rest.partition(" ")
            if word != "HELLO" or not hmac.compare_digest(token.encode(), self.token.encode()) \
                    or not rank.isdigit() or int(rank) >= self._world:
                self._drop(conn)
                return False
            conn.rank = int(rank)
            if self._first is not None:
                self._send(conn, _line("ABORT", str(self._first[0]), self._first[1]))
            return True
        if word == "DONE":
            conn.done = True
            self._ended.append(conn.rank)
        elif word == "FAIL":
            self._failed(conn, _unescape(rest), answer=True)
        return True

    def _eof(self, conn: _Conn) -> None:
        if conn.rank >= 0 and not conn.done:
            self._failed(conn, f"rank {conn.rank}: {_GONE}", answer=False)
        self._drop(conn)

    def _failed(self, conn: _Conn, cause: str, *, answer: bool) -> None:
        conn.done = True  # nothing more is expected from it
        if self._first is None and answer:
            # A rank that failed because a peer's process died (gloo saw the peer's sockets close)
            # reports after the kernel closed the dead process's socket here too: take the death first.
            self._reap_deaths(conn)
        if self._first is None:
            self._first = (conn.rank, cause)
            if answer:
                self._send(conn, _line("FIRST", ",".join(map(str, self._ended))))
            abort = _line("ABORT", str(conn.rank), cause)
            for other in list(self._conns.values()):
                if other is not conn and other.rank >= 0 and not other.done:
                    self._send(other, abort)
        elif answer:
            self._send(conn, _line("ABORT", str(self._first[0]), self._first[1]))

    def _reap_deaths(self, reporting: _Conn) -> None:
        """Handle every other connection whose peer already closed it (its process died)."""
        for other in list(self._conns.values()):
            if other is reporting or other.rank < 0 or other.done:
                continue
            try:
                peek = other.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                peek = b""
            if not peek:
                self._eof(other)
                if self._first is not None:
                    return

    def _send(self, conn: _Conn, data: bytes) -> None:
        # A few KiB to a peer that reads at once; a peer that does not read is dropped.
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(1.0)
            conn.sock.sendall(data)
            conn.sock.setblocking(False)
        except OSError:
            self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        if self._conns.pop(conn.sock.fileno(), None) is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        conn.sock.close()


class Link:
    """One rank's connection to its run's hub.

    ``on_abort(rank, cause)`` is called (on the link's thread, once) when another rank
    failed first, or when the hub is gone while the link is open (rank 0's proc died).
    """

    def __init__(self, host: str, port: int, token: str, rank: int,
                 on_abort: Callable[[int, str], None]) -> None:
        self._on_abort = on_abort
        self._rank = rank
        self._closed = False
        self._verdict: Verdict | None = None
        self._answered = threading.Event()
        self._aborted = False
        self._sock = socket.create_connection((host, port), timeout=HELLO_TIMEOUT)
        self._sock.settimeout(None)
        self._sock.sendall(_line("HELLO", token, str(rank)))
        self._thread = threading.Thread(target=self._read, name="tetrarch-spmd-link", daemon=True)
        self._thread.start()

    def fail(self, cause: str) -> Verdict:
        """Report this rank's failure; the hub's verdict (first, unless the hub is gone)."""
        try:
            self._sock.sendall(_line("FAIL", cause))
        except OSError:
            pass
        self._answered.wait(VERDICT_TIMEOUT)
        return self._verdict or Verdict(True, self._rank, cause)

    def done(self) -> None:
        """This rank's program ended normally."""
        with contextlib.suppress(OSError):
            self._sock.sendall(_line("DONE"))

    def close(self) -> None:
        """Close the connection (after ``done`` or ``fail``); the hub takes a close without either as a death."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5.0)

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                if not self._closed and not self._answered.is_set():
                    self._abort(0, f"rank 0: {_GONE} (its failure line closed)")
                self._answered.set()
                return
            lines, buf = _take_lines(buf + data)
            for line in lines:
                self._handle(line)
            if len(buf) >= MAX_LINE:
                buf = b""

    def _handle(self, line: str) -> None:
        word, _, rest = line.partition(" ")
        if word == "FIRST":
            ended = tuple(int(r) for r in rest.split(",") if r.isdigit())
            self._verdict = Verdict(True, self._rank, "", ended)
            self._answered.set()
        elif word == "ABORT":
            rank, _, cause = rest.partition(" ")
            first_rank = int(rank) if rank.isdigit() else -1
            self._verdict = Verdict(False, first_rank, _unescape(cause))
            self._answered.set()
            self._abort(first_rank, _unescape(cause))

    def _abort(self, rank: int, cause: str) -> None:
        if not self._aborted:
            self._aborted = True
            self._on_abort(rank, cause)
