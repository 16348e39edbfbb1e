"""``breakpoint()`` in an endpoint: the actor pauses and a debugger attaches from the client's machine.

In a proc, ``breakpoint()`` on an actor's thread (:func:`breakpoint_hook`, installed when the
proc's first actor spawns unless ``PYTHONBREAKPOINT`` or another hook is set) opens a
one-session listener (loopback, or the proc's routable address when the allocation spans
hosts) with a fresh token and tells the actor mesh's owner (``proc``/``debug_wait``). The
owner, when it can be attached to (its admin server runs: ``tetrarch debug`` finds sessions
through it), records the session (:data:`SESSIONS`), says on its stderr which actor waits
and where, and answers ``wait``; the actor's thread then waits for the debugger and runs
:class:`pdb.Pdb` over that connection (``n``, ``s``, ``p``, ``c``, ``bt``, ...). The other
actors keep running. An owner that cannot be attached to answers why, and the breakpoint is
skipped with a warning saying how to enable it, instead of a hang.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time
from typing import Any

from ..._log import get_logger
from ..._transport._route import host_of
from ..router._router import PeerUnreachable, Router
from ..services._ask import Request, ask
from ..values import _serial, _wire
from ..values._context import _current

__all__ = ["SESSIONS", "DebugSessions", "breakpoint_hook", "install_breakpoint_hook"]

_log = get_logger("debug")

#: Seconds a proc waits for its owner to say whether a debugger can attach.
ASK_TIMEOUT_S = 10.0


class DebugSessions:
    """The owner's side: actors paused in ``breakpoint()`` that a debugger may attach to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, dict[str, Any]] = {}
        #: Why no debugger can attach here ('' when one can: the admin server sets it so).
        self.unavailable = ("no debugger can attach to this program: serve its admin API (TETRARCH_ADMIN=1, "
                            "tetrarch.configure(admin=True) or tetrarch.admin.serve()) and attach with "
                            "`tetrarch debug`")

    def waiting(self, session: dict[str, Any]) -> str:
        """A paused actor asks; returns '' (it waits: recorded and announced) or why it should not."""
        if self.unavailable:
            return self.unavailable
        with self._lock:
            self._sessions[session["id"]] = session
        print(f"tetrarch: {session['actor']} (rank {session['rank']} of {session['mesh']}) is paused in breakpoint() "
              f"at {session['where']}: attach with `tetrarch debug`", file=sys.stderr, flush=True)
        return ""

    def ended(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return sorted(self._sessions.values(), key=lambda s: s["since"])


#: This process's sessions (meaningful in an owner: the client).
SESSIONS = DebugSessions()


def _listen_host(router: Router) -> str:
    return (host_of(router.address) if router.spans_hosts else None) or "127.0.0.1"


def _ask_owner(router: Router, owner: str, session: dict[str, Any]) -> str:
    """'' if the owner records the session (a debugger may attach), else why not."""
    (answer,) = ask(router, [Request(owner, _wire.SVC_PROC, "debug_wait", tuple(_serial.dumps(session)))],
                    ASK_TIMEOUT_S)
    if answer.status is None:
        return f"the owner did not answer within {ASK_TIMEOUT_S:g} s (or cannot be reached)"
    return str(answer.value) if answer.ok else f"the owner refused: {answer.value}"


def _first_line(conn: socket.socket, limit: int = 256) -> str:
    """The token line, read a byte at a time: what follows it is pdb's input, left in the socket."""
    data = bytearray()
    try:
        while len(data) < limit:
            byte = conn.recv(1)
            if not byte or byte == b"\n":
                break
            data += byte
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip()


def breakpoint_hook(*args: Any, **kwargs: Any) -> Any:
    """``sys.breakpointhook`` of a proc: pause this actor for a debugger attached from the client's machine."""
    info = _current.get()
    runner: Any = info.instance._runner if info is not None else None
    router: Router | None = getattr(runner, "router", None)
    owner = getattr(runner, "owner_address", None)
    if info is None or runner is None or router is None or not owner:  # not an actor's thread: Python's own
        return sys.__breakpointhook__(*args, **kwargs)  # noqa: T100 - Python's own, on purpose
    frame = sys._getframe(1)
    where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    listener = socket.create_server((_listen_host(router), 0))
    host, port = listener.getsockname()[:2]
    token = secrets.token_urlsafe(24)
    session = {"id": f"{os.getpid()}-{secrets.token_hex(4)}", "actor": runner.display, "mesh": info.instance.name,
               "rank": info.instance.rank.rank, "pid": os.getpid(), "host": socket.gethostname(),
               "address": f"{host}:{port}", "token": token, "where": where, "since": time.time()}
    why = _ask_owner(router, owner, session)
    if why:
        listener.close()
        _log.warning("breakpoint() at %s skipped: %s", where, why)
        return None
    while True:
        conn, _ = listener.accept()
        conn.settimeout(ASK_TIMEOUT_S)
        given = _first_line(conn)
        if secrets.compare_digest(given, token):
            conn.settimeout(None)
            break
        conn.close()  # a stranger: keep waiting for the debugger
    listener.close()

    def ended() -> None:
        try:
            router.send(owner, [_wire.sys_header(_wire.SVC_PROC, "debug_end"), *_serial.dumps(session["id"])])
        except PeerUnreachable:
            pass

    from ._remote_pdb import RemotePdb  # here: pdb is loaded by a process an actor of which pauses

    debugger = RemotePdb(conn, ended)
    print(f"attached to {runner.display} (rank {session['rank']} of {session['mesh']}), paused at {where}",
          file=debugger.stdout)
    debugger.set_trace(frame)
    return None


def install_breakpoint_hook() -> None:
    """Make ``breakpoint()`` on an actor's thread pause that actor for ``tetrarch debug`` (a proc does it
    when its first actor spawns), unless ``PYTHONBREAKPOINT`` or a hook of the user's is set."""
    if os.environ.get("PYTHONBREAKPOINT") is None and sys.breakpointhook is sys.__breakpointhook__:
        sys.breakpointhook = breakpoint_hook
