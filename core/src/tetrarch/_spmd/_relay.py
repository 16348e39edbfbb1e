"""The job server's stdout and stderr: the ranks' lines go to the caller of the run in progress.

The server is the tetrarch client of its procs, so its output printer writes each rank's
lines, prefixed (``[ranks gpus=1] loss 0.3``), to ``sys.stdout``/``sys.stderr``. The server
replaces both with :class:`RelayStream`, whose complete lines go to :class:`Relay`: to the
connection of the run in progress when there is one (as ``Output`` frames), else to the
server's log file (fds 1 and 2, which the launcher pointed at it).

Between the end of a run and its ``RunDone`` the server has every rank write a mark line
(``_proc_side.output_mark``) to stdout and stderr: output travels proc -> host agent ->
printer on its own path, so the run's reply may arrive before its last lines; once the
relay has seen every rank's marks, every earlier line was relayed.
"""

from __future__ import annotations

import io
import os
import socket
import threading
import time

from . import _control
from ._proc_side import output_mark

__all__ = ["Relay", "RelayStream"]

#: Seconds a send of output to the caller may block before the caller is dropped (it stopped reading).
SEND_TIMEOUT = 60.0
_MARK = output_mark("", 0).split(" ")[0]  # what every mark line contains
_MAX_LINE = _control.MAX_FRAME - 1024


class Relay:
    """Where the server's output lines go: the subscribed connection, else the log (fds 1 and 2)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._conn: socket.socket | None = None
        self._token = ""
        self._marks = 0

    def subscribe(self, conn: socket.socket | None) -> None:
        """Send lines to ``conn`` from now on (None: to the log)."""
        with self._cond:
            self._conn = conn

    def expect_marks(self, token: str) -> None:
        """Count the mark lines of ``token`` from now on (see :meth:`wait_marks`)."""
        with self._cond:
            self._token, self._marks = token, 0

    def wait_marks(self, n: int, timeout: float) -> bool:
        """Wait until ``n`` mark lines of the expected token came; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._marks < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def line(self, fd: int, text: str) -> None:
        """One complete line (with its newline) written to ``fd`` (1 or 2) of the server."""
        if _MARK in text:
            with self._cond:
                if self._token and f"{_MARK} {self._token} " in text:
                    self._marks += 1
                    self._cond.notify_all()
            return
        with self._cond:
            conn = self._conn
        if conn is not None:
            if len(text) > _MAX_LINE:
                text = text[:_MAX_LINE] + " [line cut by tetrarch]\n"
            try:
                _control.send(conn, _control.Output(fd, text))
                return
            except OSError:  # the caller went away or stopped reading: its run is cancelled elsewhere
                with self._cond:
                    if self._conn is conn:
                        self._conn = None
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        except OSError:
            pass


class RelayStream(io.TextIOBase):
    """A text stream (for ``sys.stdout``/``sys.stderr``) that hands complete lines to a :class:`Relay`."""

    def __init__(self, relay: Relay, fd: int) -> None:
        super().__init__()
        self._relay = relay
        self._fd = fd
        self._partial = ""
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        with self._lock:
            lines = (self._partial + s).split("\n")
            self._partial = lines.pop()
        for line in lines:
            self._relay.line(self._fd, line + "\n")
        return len(s)

    def flush(self) -> None:
        """Lines are relayed as they complete; a partial line waits for its newline."""
