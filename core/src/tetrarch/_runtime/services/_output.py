"""Procs' output at their owner's terminal, prefixed with mesh and rank: ``[trainers hosts=0 gpus=1] loss 0.31``.

A host agent reads fd 1 and 2 of each proc it started (``spawn_watched(..., output=)``),
so prints, ``logging``, ``warnings``, C extensions, subprocesses and crash tracebacks
are all caught. Its :class:`OutputForwarder` batches the lines per owner (a message
leaves :data:`FLUSH_S` after its first line, or at :data:`MAX_BATCH` bytes) and sends
them over the authenticated connection (``output``/``lines``). The owner's
:class:`OutputPrinter` writes each line to its own stdout or stderr, as the proc did,
after the prefix, in the order each proc wrote them.

Flow control is back-pressure: the owner answers each batch once it wrote it, a host
agent has at most :data:`IN_FLIGHT` unanswered batches per owner and holds at most
:data:`MAX_PENDING` bytes; past that it stops reading its procs' pipes. A proc's Python
streams never block on a full pipe (``_stdio``: they hold up to 4 MiB each, then drop and
count), so an agent that stops reading costs output, never a hung call. Output bound for
an owner that is gone is dropped.

Nothing is lost at the end: a host agent hands on every line a proc wrote before
reporting its exit, on the same connection, and ``ProcMesh.stop()`` waits for the
owner's printer to have written them (:meth:`OutputPrinter.drain`).
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from ..._config import AGGREGATE_WINDOW
from ..._log import get_logger
from ..router._router import PeerUnreachable, Router
from ..values import _serial, _wire
from ..values._future import CoroutineFuture

__all__ = ["FLUSH_S", "IN_FLIGHT", "MAX_BATCH", "MAX_PENDING", "OutputForwarder", "OutputPrinter",
           "set_output_options", "set_process_title"]

_log = get_logger("output")

FLUSH_S = 0.02  #: a batch leaves at most this long after its first line
MAX_BATCH = 256 * 1024  #: bytes of lines in one message at most (one line may exceed it)
IN_FLIGHT = 4  #: batches sent to one owner and not yet answered, at most
MAX_PENDING = 4 * 1024 * 1024  #: bytes a host agent holds unsent before its procs' writes block
_FOLD_LIMIT = 10_000  #: distinct lines held in an aggregation window before it is written early


# -- host agent side ---------------------------------------------------------------------
@dataclass
class _Source:
    owner: str
    mesh: str
    coords: str
    forward: bool
    unsent: int = 0  # lines taken in, not sent yet


class OutputForwarder:
    """A host agent's half: takes its procs' lines and sends them to their owners in batches."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._cond = threading.Condition()
        self._sources: dict[str, _Source] = {}
        self._pending: dict[str, collections.deque[tuple[str, int, bytes]]] = {}  # owner -> lines, in order
        self._first: dict[str, float] = {}  # owner -> when its oldest pending line came
        self._in_flight: dict[str, int] = {}
        self._ports: dict[str, int] = {}
        self._bytes = 0
        self._urgent = 0  # callers of finish() waiting
        self._closed = False
        router.on_peer_lost(lambda addr, _err: self._owner_gone(addr))
        threading.Thread(target=self._send_loop, name="tetrarch-output", daemon=True).start()

    def add(self, ident: str, owner: str, mesh: str, coords: str, forward: bool) -> None:
        """Expect lines of the proc ``ident``, for ``owner`` (``forward``) or our own stdout and stderr."""
        with self._cond:
            self._sources[ident] = _Source(owner, mesh, coords, forward)

    def set_forward(self, idents: Sequence[str], forward: bool) -> None:
        with self._cond:
            for ident in idents:
                src = self._sources.get(ident)
                if src is not None:
                    src.forward = forward

    def line(self, ident: str, fd: int, data: bytes) -> None:
        """One line of the proc ``ident`` (its watcher thread); blocks while too much is unsent."""
        with self._cond:
            src = self._sources.get(ident)
            if src is not None and src.forward:
                while self._bytes > MAX_PENDING and not self._closed and src.owner not in self.router.dead_peers:
                    self._cond.wait()
                self._pending.setdefault(src.owner, collections.deque()).append((ident, fd, data))
                self._first.setdefault(src.owner, time.monotonic())
                self._bytes += len(data)
                src.unsent += 1
                self._cond.notify_all()
                return
        _write(fd, data)  # forwarding off (or an unknown proc): today's path, unprefixed

    def finish(self, ident: str) -> None:
        """Send every line the proc ``ident`` wrote (it exited) and forget it; call before reporting its exit."""
        with self._cond:
            self._urgent += 1
            self._cond.notify_all()
            try:
                while (src := self._sources.get(ident)) is not None and src.unsent and not self._closed:
                    self._cond.wait()
            finally:
                self._urgent -= 1
                self._sources.pop(ident, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _owner_gone(self, owner: str) -> None:
        with self._cond:
            self._in_flight.pop(owner, None)  # its answers will never come; sends now fail fast
            self._cond.notify_all()

    def _acked(self, owner: str, _hdr: Any, _payload: list) -> None:  # I/O thread
        with self._cond:
            self._in_flight[owner] = max(0, self._in_flight.get(owner, 0) - 1)
            self._cond.notify_all()

    def _ready_owner(self, now: float) -> tuple[str | None, float | None]:
        """An owner whose batch may leave now, else when to look again (lock held)."""
        wake: float | None = None
        for owner, lines in self._pending.items():
            if not lines or self._in_flight.get(owner, 0) >= IN_FLIGHT:
                continue
            due = self._first[owner] + FLUSH_S
            if self._urgent or due <= now or self._bytes >= MAX_BATCH:
                return owner, None
            wake = due if wake is None else min(wake, due)
        return None, wake

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    owner, wake = self._ready_owner(time.monotonic())
                    if owner is not None:
                        break
                    self._cond.wait(None if wake is None else max(0.0, wake - time.monotonic()))
                batch, size = self._take(owner)
                self._in_flight[owner] = self._in_flight.get(owner, 0) + 1
                port = self._ports.get(owner)
                if port is None:
                    port = self._ports[owner] = self.router.open_port(partial(self._acked, owner))
            try:
                self.router.send(owner, [_wire.sys_header(_wire.SVC_OUTPUT, "lines", self.router.address, port),
                                          *_serial.dumps(batch)])
            except PeerUnreachable:
                self._owner_gone(owner)  # the owner is gone: nobody is left to print its procs' output
            except Exception:  # noqa: BLE001 - the sender must survive
                _log.exception("sending output to %s failed", owner)
                self._owner_gone(owner)
            with self._cond:
                self._bytes -= size
                for rec in batch:
                    src = self._sources.get(rec.ident)
                    if src is not None:
                        src.unsent -= len(rec.lines)
                self._cond.notify_all()

    def _take(self, owner: str) -> tuple[list[_wire.OutputLines], int]:
        """Up to MAX_BATCH bytes of ``owner``'s pending lines, grouped per proc in order (lock held)."""
        lines = self._pending[owner]
        per: dict[str, list[tuple[int, bytes]]] = {}
        size = 0
        while lines and (size == 0 or size + len(lines[0][2]) <= MAX_BATCH):
            ident, fd, data = lines.popleft()
            per.setdefault(ident, []).append((fd, data))
            size += len(data)
        if lines:
            self._first[owner] = time.monotonic()
        else:
            del self._pending[owner], self._first[owner]
        batch = []
        for ident, got in per.items():
            src = self._sources.get(ident)
            batch.append(_wire.OutputLines(ident, src.mesh if src else ident, src.coords if src else "", got))
        return batch, size


# -- owner side ------------------------------------------------------------------------------
class OutputPrinter:
    """The owner's half (every process has one): writes its procs' lines, prefixed, to its stdout and stderr."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[list[_wire.OutputLines], str | None, int | None]] = collections.deque()
        self._busy = False
        self._windows: dict[str, float] = {}  # proc ident -> aggregation window (logging_option)
        self._folded: dict[tuple[str, int, bytes], list[Any]] = {}  # (mesh, fd, line) -> [count, first prefix]
        self._deadline: float | None = None
        self._thread: threading.Thread | None = None
        router.add_service(_wire.SVC_OUTPUT, self.service)

    def service(self, hdr: _wire.SysHeader, payload: list, _conn: Any) -> None:
        """``output`` messages (I/O thread): ``lines`` are queued for the printer thread; ``level`` applies here."""
        if hdr.op == "lines":
            batch = _serial.loads(payload)
            with self._cond:
                self._queue.append((batch, hdr.reply_addr, hdr.reply_port))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name="tetrarch-printer", daemon=True)
                    self._thread.start()
                self._cond.notify_all()
        elif hdr.op == "level":
            set_log_level(_serial.loads(payload))
            self.router.reply_later(hdr.reply_addr, hdr.reply_port, 0, _wire.OK, None)

    def configure(self, idents: Sequence[str], window: float | None) -> None:
        """Aggregate the lines of ``idents`` in windows of ``window`` s (None or 0: print each line)."""
        self.drain()
        with self._cond:
            for ident in idents:
                self._windows[ident] = window or 0.0

    def drain(self, timeout: float | None = None) -> bool:
        """Write everything received so far, folded lines included; False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            self._flush_folded()
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if self._deadline is not None and time.monotonic() >= self._deadline:
                        self._flush_folded()
                    wait = None if self._deadline is None else max(0.0, self._deadline - time.monotonic())
                    self._cond.wait(wait)
                batch, addr, port = self._queue.popleft()
                self._busy = True
            try:
                self._print(batch)
            except Exception:  # noqa: BLE001 - the printer must survive (and answer: the sender waits)
                _log.exception("printing procs' output failed")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
            self.router.reply(addr, port, 0, _wire.OK, None)  # the sender's credit

    def _print(self, batch: list[_wire.OutputLines]) -> None:
        default = AGGREGATE_WINDOW()
        out: dict[int, list[bytes]] = {1: [], 2: []}
        for rec in batch:
            prefix = f"[{rec.mesh} {rec.coords}] " if rec.coords else f"[{rec.mesh}] "
            window = self._windows.get(rec.ident, default)
            for fd, line in rec.lines:
                if window > 0:
                    self._fold(rec.mesh, fd, line, prefix, window)
                else:
                    out[fd].append(prefix.encode() + _terminated(line))
        for fd, chunks in out.items():
            if chunks:
                _write(fd, b"".join(chunks))

    def _fold(self, mesh: str, fd: int, line: bytes, prefix: str, window: float) -> None:
        with self._cond:
            entry = self._folded.setdefault((mesh, fd, _terminated(line)), [0, prefix])
            entry[0] += 1
            if self._deadline is None:
                self._deadline = time.monotonic() + window
            if len(self._folded) >= _FOLD_LIMIT:
                self._flush_folded()

    def _flush_folded(self) -> None:  # lock held
        folded, self._folded, self._deadline = self._folded, {}, None
        out: dict[int, list[bytes]] = {1: [], 2: []}
        for (mesh, fd, line), (count, prefix) in folded.items():
            head = prefix if count == 1 else f"[{mesh} {count} similar log lines] "
            out[fd].append(head.encode() + line)
        for fd, chunks in out.items():
            if chunks:
                _write(fd, b"".join(chunks))


def _terminated(line: bytes) -> bytes:
    return line if line.endswith(b"\n") else line + b"\n"


def _write(fd: int, data: bytes) -> None:
    """Write ``data`` to our stdout (fd 1) or stderr (fd 2) after what Python buffered there."""
    stream = sys.stdout if fd == 1 else sys.stderr
    if stream is None:
        return
    try:
        stream.flush()
        buf = getattr(stream, "buffer", None)
        if buf is not None:
            buf.write(data)
            buf.flush()
        else:  # replaced by a text-only stream (a test's capture, a notebook)
            stream.write(data.decode("utf-8", "replace"))
            stream.flush()
    except (OSError, ValueError):
        pass  # closed or broken: nowhere left to write


def set_log_level(level: int) -> None:
    """Let Python ``logging`` records of ``level`` and above through in this process.

    Sets the root logger's level; when the root logger has no handler, adds one that
    writes to stderr (without it records below WARNING would go nowhere), in
    ``logging.BASIC_FORMAT`` led by ``[actor=...]`` for records made inside an actor.
    """
    root = logging.getLogger()
    root.setLevel(level)
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(ActorFormatter())
        root.addHandler(handler)


class ActorFormatter(logging.Formatter):
    """``logging.BASIC_FORMAT``, led by ``[actor=<mesh>] `` for records made inside an actor.

    The actor comes from ``record.actor_name`` (see ``_context.install_log_context``, which procs
    install). The rank is left out: the forwarded line's prefix (``[trainers gpus=1]``) already
    names it, and identical records of many ranks then still fold (``aggregate_window_sec``).
    ``record.actor`` (mesh and rank) is there for formats of one's own (``%(actor)s``).
    """

    def __init__(self) -> None:
        super().__init__(logging.BASIC_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        actor = getattr(record, "actor_name", "")
        return f"[actor={actor}] {text}" if actor else text


# -- logging_option -----------------------------------------------------------------------------
def set_output_options(router: Router, printer: OutputPrinter, procs: Sequence[tuple[str, str]],
                       hosts: Sequence[str], stream_to_client: bool, window: float | None,
                       level: int) -> CoroutineFuture[None]:
    """Apply ``ProcMesh.logging_option`` to ``procs`` (``(ident, address)``) started by the agents at ``hosts``.

    The future completes once every live host agent and proc applied it; dead ones are skipped.
    It is also a coroutine (Monarch's ``logging_option`` is an ``async def``).
    """
    printer.configure([ident for ident, _ in procs], window)
    mode = _serial.dumps(_wire.OutputMode([ident for ident, _ in procs], stream_to_client))
    targets = [(addr, _wire.SVC_HOST, "output_mode", mode) for addr in hosts]
    targets += [(addr, _wire.SVC_OUTPUT, "level", _serial.dumps(level)) for _, addr in procs]
    fut = cast("CoroutineFuture[None]", CoroutineFuture._new())
    pending = {t[0] for t in targets}
    lock = threading.Lock()
    ports: list[int] = []
    tokens: list[tuple[str, int]] = []

    def done(addr: str, *_: Any) -> None:
        with lock:
            if addr not in pending:
                return
            pending.discard(addr)
            last = not pending
        if last:
            for port in ports:
                router.close_port(port)
            for watched, token in tokens:
                router.unwatch(watched, token)
            fut._set_result(None)

    if not targets:
        fut._set_result(None)
    ports.extend(router.open_port(partial(done, t[0])) for t in targets)
    for (addr, service, op, payload), port in zip(targets, ports, strict=True):
        tokens.append((addr, router.watch(addr, partial(done, addr))))
        try:
            router.send(addr, [_wire.sys_header(service, op, router.address, port), *payload])
        except PeerUnreachable as exc:
            if addr not in router.dead_peers:  # a dead one is skipped as documented; a live one is news
                _log.warning("logging_option could not reach %s, which is not known dead: %s", addr, exc)
            done(addr)
    return fut


# -- process titles -------------------------------------------------------------------------------
_PR_SET_NAME = 15


def set_process_title(title: str) -> None:
    """Show ``title`` for this process in ``ps`` and ``top`` (``tetrarch proc trainers hosts=0 gpus=1``).

    Uses the ``setproctitle`` library (the whole command line); without it, only the
    kernel's 15-character process name (``prctl(PR_SET_NAME)``, ``ps -o comm``); off Linux,
    nothing. The title is cut to the length of the original command line (``SPT_NOENV``):
    longer, it would overwrite what ``/proc/<pid>/environ`` shows. Never raises.
    """
    os.environ.setdefault("SPT_NOENV", "1")  # read by setproctitle at its first use
    try:
        from setproctitle import setproctitle
    except ImportError:
        pass
    else:
        setproctitle(title)
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)
    except Exception:  # noqa: BLE001 - a title is a convenience
        pass

