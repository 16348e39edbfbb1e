"""pdb over one connection, for an actor paused in ``breakpoint()`` (see :mod:`._debug`); a module of
its own so that only a process whose actor pauses loads :mod:`pdb`."""

from __future__ import annotations

import pdb  # noqa: T100 - the debugger actors are paused in, on purpose
import socket
from collections.abc import Callable

__all__ = ["RemotePdb"]


class RemotePdb(pdb.Pdb):
    """pdb over one connection; tells the owner when the session is over."""

    def __init__(self, conn: socket.socket, on_end: Callable[[], None]) -> None:
        self._conn = conn
        self._file = conn.makefile("rw", buffering=1, encoding="utf-8", errors="replace", newline="\n")
        self._on_end = on_end
        super().__init__(stdin=self._file, stdout=self._file, nosigint=True, readrc=False)
        self.use_rawinput = False
        self.prompt = "(Pdb) "

    def _finish(self) -> None:
        on_end, self._on_end = self._on_end, lambda: None
        for closing in (self._file.close, self._conn.close):
            try:
                closing()
            except OSError:
                pass
        on_end()

    def set_continue(self) -> None:
        super().set_continue()
        self._finish()

    def do_quit(self, arg: str) -> bool:
        """``q`` (and the end of the debugger's input): detach, and let the actor go on."""
        self.set_continue()
        return True

    do_q = do_exit = do_EOF = do_quit
