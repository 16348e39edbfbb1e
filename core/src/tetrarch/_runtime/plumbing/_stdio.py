"""A proc's ``sys.stdout`` and ``sys.stderr`` never block on a host agent that does not read.

fd 1 and fd 2 of a proc are pipes to its host agent (``_output``). A pipe holds 64 KiB;
an agent that stops reading (SIGSTOPped, its host frozen, or its owner's terminal far
behind) would leave the next ``print`` blocked for good, and with it the actor's call,
while the proc itself kept answering heartbeats (issue 28, item 7).

So the Python-level streams write through a *second* open file description of the same
pipe (``/proc/self/fd/N`` reopened with ``O_NONBLOCK``: the flag belongs to the
description, so fd 1 and 2 themselves, which C code and subprocesses inherit, keep
blocking writes). A write that finds the pipe full waits up to :data:`STALL_S` for room
(an agent that reads empties it in microseconds; so output keeps its order with what C
code writes to the same descriptor), then keeps the rest in memory, in order, and a
drainer thread hands it on as the pipe empties; later writes queue behind it without
waiting. Past :data:`HELD_LIMIT` bytes held
per stream, new output is dropped and counted; once the pipe takes data again the stream
gets one line saying how many bytes were lost (``[tetrarch] ... dropped``). At exit, what
is held is handed on for at most :data:`EXIT_FLUSH_S` seconds.

What this does not cover: output written below Python (C ``printf``, a subprocess's
writes) still blocks on a full pipe; a host agent found unreachable has its procs
declared lost and told to exit (``_launch``), so that wait ends too.
"""

from __future__ import annotations

import atexit
import collections
import io
import os
import select
import stat
import sys
import threading
import time
from typing import cast

__all__ = ["EXIT_FLUSH_S", "HELD_LIMIT", "STALL_S", "NonBlockingPipe", "flush_held", "install"]

HELD_LIMIT = 4 * 1024 * 1024  #: bytes one stream keeps while its pipe is full; more is dropped, and counted
EXIT_FLUSH_S = 2.0  #: seconds the exit waits for held output to reach a pipe that is full
STALL_S = 1.0  #: seconds a write waits for a full pipe to take its data before it is held instead
_installed: list[NonBlockingPipe] = []


class NonBlockingPipe(io.RawIOBase):
    """A write-only raw stream over a pipe that never blocks its writer (see the module docstring).

    ``fileno()`` is the original (blocking) descriptor, for code that hands it to a subprocess.
    """

    def __init__(self, fd: int, name: str, limit: int = HELD_LIMIT, stall_s: float = STALL_S) -> None:
        super().__init__()
        self._orig = fd
        self._fd = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._name = name
        self._limit = limit
        self._cond = threading.Condition()
        self._held: collections.deque[memoryview] = collections.deque()
        self._held_bytes = 0
        self._dropped = 0  # bytes dropped since the last note
        self.dropped_total = 0
        self._drainer: threading.Thread | None = None
        self._stall_s = stall_s
        self._poller = select.poll()
        self._poller.register(self._fd, select.POLLOUT)

    # -- io.RawIOBase ---------------------------------------------------------------
    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._orig

    def isatty(self) -> bool:
        return False

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        data = memoryview(b).cast("B")
        size = data.nbytes
        with self._cond:
            if not self._held and not self._dropped:
                try:
                    data = self._write_within(data, self._stall_s)
                except BrokenPipeError:
                    return size  # nobody reads any more: the output goes nowhere, as a closed terminal's
                if not data.nbytes:
                    return size
            if self._held_bytes + data.nbytes > self._limit:
                self._dropped += data.nbytes
                self.dropped_total += data.nbytes
            else:
                self._held.append(memoryview(bytes(data)))  # the caller may reuse its buffer
                self._held_bytes += data.nbytes
            self._start_drainer()
            self._cond.notify_all()
        return size

    def _write_within(self, data: memoryview, limit: float) -> memoryview:
        """Write ``data``, waiting up to ``limit`` s in all for room; return what is left."""
        deadline = None
        while data.nbytes:
            try:
                data = data[os.write(self._fd, data):]
                continue
            except BlockingIOError:
                pass
            now = time.monotonic()
            if deadline is None:
                deadline = now + limit
            if now >= deadline or not self._poller.poll(max(1, int((deadline - now) * 1000))):
                break
        return data

    # -- the drainer ------------------------------------------------------------------
    def _start_drainer(self) -> None:  # lock held
        if self._drainer is None:
            self._drainer = threading.Thread(target=self._drain, name=f"tetrarch-{self._name}", daemon=True)
            self._drainer.start()

    def _drain(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLOUT)
        while True:
            with self._cond:
                while not self._held and not self._dropped:
                    self._cond.wait()
            poller.poll()  # until the pipe takes data (or its reader is gone: POLLERR)
            with self._cond:
                try:
                    self._write_held()
                except BrokenPipeError:
                    self._held.clear()
                    self._held_bytes = self._dropped = 0
                self._cond.notify_all()

    def _write_held(self) -> None:  # lock held
        while self._held:
            head = self._held[0]
            try:
                written = os.write(self._fd, head)
            except BlockingIOError:
                return
            self._held_bytes -= written
            if written < head.nbytes:
                self._held[0] = head[written:]
                return
            self._held.popleft()
        if self._dropped:
            note = (f"\n[tetrarch] {self._dropped} bytes of {self._name} were dropped: its host agent did not "
                    f"read them in time (it is stopped, or far behind); {HELD_LIMIT} bytes are kept at most\n")
            try:
                os.write(self._fd, note.encode())
            except BlockingIOError:
                return
            self._dropped = 0

    def wait_drained(self, timeout: float) -> bool:
        """Wait until nothing is held (True), for at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._held:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True


def install() -> None:
    """Give ``sys.stdout`` and ``sys.stderr`` non-blocking pipes, where fd 1 / fd 2 are pipes.

    Line-buffered text streams with the old ones' encoding and error handler. Other
    kinds of descriptor (a terminal, a file) are left as they are.
    """
    for fd, attr in ((1, "stdout"), (2, "stderr")):
        old = getattr(sys, attr)
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            raw = NonBlockingPipe(fd, attr)
        except OSError:
            continue
        stream = io.TextIOWrapper(io.BufferedWriter(cast("io.RawIOBase", raw)),
                                  encoding=getattr(old, "encoding", None) or "utf-8",
                                  errors=getattr(old, "errors", None) or "strict", line_buffering=True)
        if old is not None:
            try:
                old.flush()
            except (OSError, ValueError):
                pass
        setattr(sys, attr, stream)
        _installed.append(raw)
    if _installed:
        atexit.register(flush_held, EXIT_FLUSH_S)


def flush_held(timeout: float = EXIT_FLUSH_S) -> None:
    """Flush the streams and wait, at most ``timeout`` s in all, for their held output to leave."""
    deadline = time.monotonic() + timeout
    for attr in ("stdout", "stderr"):
        try:
            getattr(sys, attr).flush()
        except (OSError, ValueError, AttributeError):
            pass
    for raw in _installed:
        raw.wait_drained(max(0.0, deadline - time.monotonic()))
