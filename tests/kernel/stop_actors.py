"""Actor classes for the bounded-stop tests (procs import this module by name).

Each blocks in a way Python cannot interrupt, after telling the test through a port
that it got there (so the test never guesses with a sleep).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading

from tetrarch import Actor, Port, endpoint


class BlockedInit(Actor):
    """``__init__`` sends the proc's pid, then never returns."""

    def __init__(self, port: Port) -> None:
        port.send(os.getpid())
        threading.Event().wait()


class Blocker(Actor):
    """Endpoints (sync, async) that send the pid, then never return."""

    @endpoint
    def block(self, port: Port) -> None:
        port.send(os.getpid())
        threading.Event().wait()

    @endpoint
    async def block_async(self, port: Port) -> None:
        port.send(os.getpid())
        await asyncio.Event().wait()

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class Exiter(Actor):
    """Leaves things behind for the interpreter's exit: atexit handlers and threads (a handler that
    writes a file is ``supervision_actors.Finalizer``)."""

    @endpoint
    def print_at_exit(self, line: str) -> int:
        atexit.register(lambda: print(line))  # not flushed by the handler: the exit must flush it
        return os.getpid()

    @endpoint
    def hang_at_exit(self) -> int:
        atexit.register(lambda: threading.Event().wait())
        return os.getpid()

    @endpoint
    def leave_thread(self) -> int:
        threading.Thread(target=threading.Event().wait, name="left-running", daemon=False).start()
        return os.getpid()
