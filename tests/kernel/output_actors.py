"""Actor classes for the proc output tests (procs import this module by name)."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import warnings

from tetrarch import Actor, current_rank, endpoint

#: Lines each rank prints to stdout in :meth:`Talker.talk`.
LINES = 20
#: Length of the long line (longer than ``tetrarch._runtime.plumbing._spawn.MAX_LINE``).
LONG = 150_000


class Talker(Actor):
    """Writes to stdout and stderr in every way user code does."""

    @endpoint
    def talk(self) -> None:
        r = current_rank()["gpus"]
        for i in range(LINES):
            print(f"out {r} {i}")
        print(f"err {r}", file=sys.stderr)
        logging.getLogger("app").warning("log %d", r)
        warnings.warn(f"careful {r}", stacklevel=1)
        print(f"long {r} " + "x" * LONG)
        os.write(1, f"c-level {r}\n".encode())  # below Python's sys.stdout, as C code writes
        sys.stdout.write(f"tail {r} without newline")  # the last line, unterminated: flushed at exit

    @endpoint
    def both(self) -> None:
        """One short, flushed line on each stream: a single write below ``PIPE_BUF``, so
        lines of procs writing to one shared pipe cannot interleave."""
        r = current_rank()["gpus"]
        print(f"out {r}", flush=True)
        print(f"err {r}", file=sys.stderr, flush=True)

    @endpoint
    def same(self) -> None:
        r = current_rank()["gpus"]
        print("loss 0.31")
        print(f"only rank {r}")
        logging.getLogger("app").info("info %s", "shown")
        logging.getLogger("app").debug("debug hidden")

    @endpoint
    def flood(self, n: int) -> None:
        r = current_rank()["gpus"]
        for i in range(n):
            print(f"flood {r} {i}")

    @endpoint
    def say(self, text: str) -> None:
        print(text)

    @endpoint
    def crash(self) -> None:
        print("about to crash", flush=True)
        ctypes.string_at(0)  # SIGSEGV: faulthandler writes the Python stack to stderr

    @endpoint
    def pids(self) -> tuple[int, int]:
        return os.getpid(), int(os.environ["TETRARCH_HOST_AGENT_PID"])  # its parent may be the zygote
