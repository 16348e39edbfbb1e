"""The client's way out: a fatal failure ends the program from its main thread, Ctrl-C is noted.

:func:`exit_client` raises ``SystemExit`` in the main thread (through a SIGINT the
handler installed by :func:`install_exit_path` turns into it) while the program's
``__main__`` code runs, so ``finally`` blocks and atexit handlers run; with no way into
the main thread it runs the exit handlers itself and leaves. :func:`sigint_seen` tells
the stop at exit that the user pressed Ctrl-C.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Any

from ..._transport._loop import defer_while_dispatching

__all__ = ["exit_client", "exiting", "install_exit_path", "sigint_seen"]

_exit_code: list[int] = []
_prev_sigint: Any = None
#: Set once this client saw Ctrl-C (SIGINT): stopping at exit then says at once what it waits for.
_sigint_seen = threading.Event()


def sigint_seen() -> bool:
    """Whether the client got a Ctrl-C (SIGINT) since it started."""
    return _sigint_seen.is_set()


def _main_code_running(frame: Any) -> bool:
    """Whether the main thread (at ``frame``) still runs the program's ``__main__`` code.

    Not while the interpreter prints an uncaught exception, joins threads or runs atexit
    handlers: raising there would break that work (CPython then prints ``lost
    sys.stderr`` and dumps the exception object).
    """
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            return True
        frame = frame.f_back
    return False


def _on_sigint(signum: int, frame: Any) -> None:
    _sigint_seen.set()
    if defer_while_dispatching(lambda: _on_sigint(signum, frame)):
        return  # the main thread is handling a message for the transport: raise right after it
    if _exit_code:
        if _main_code_running(frame):
            raise SystemExit(_exit_code[0])
        return  # the program is already ending: let the interpreter finish its exit
    prev = _prev_sigint
    if callable(prev):
        prev(signum, frame)
    elif prev == signal.SIG_DFL:
        raise KeyboardInterrupt


def install_exit_path() -> None:
    """Let :func:`exit_client` raise ``SystemExit`` in the main thread (client only).

    Installs a SIGINT handler that delegates to the previous one unless a fatal
    fault is pending. A no-op off the main thread.
    """
    global _prev_sigint
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        prev = signal.getsignal(signal.SIGINT)
        if prev is not _on_sigint:
            _prev_sigint = prev
            signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):  # pragma: no cover - embedded interpreters
        pass


def exit_client(code: int) -> None:
    """End the client process with ``code``, letting atexit handlers run.

    While the main thread runs the program, it gets ``SystemExit(code)``. Once the
    program has ended on its own (its uncaught exception is being printed, atexit
    handlers run), nothing is interrupted: the interpreter is already exiting.
    """
    if _exit_code:
        return
    _exit_code.append(code)
    main = threading.main_thread()
    if main.is_alive() and signal.getsignal(signal.SIGINT) is _on_sigint and main.ident is not None:
        if not _main_code_running(sys._current_frames().get(main.ident)):
            return
        # Wakes the main thread even when it is blocked, and raises SystemExit there.
        signal.pthread_kill(main.ident, signal.SIGINT)
        return
    try:  # no way into the main thread: run the exit handlers here, then leave
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def exiting() -> bool:
    """Whether :func:`exit_client` was called: the client is ending."""
    return bool(_exit_code)
