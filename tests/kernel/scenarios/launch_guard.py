"""Scenario: a launcher and its child, started the way core's programs are (no pre-exec step).

``launcher``: start ``child`` through ``spawn_watched`` as if it were one of core's programs
(``_guards_itself`` answers yes for it), print the child's pid, then wait for stdin to close.

``child [wait]``: call ``die_with_launcher()``, print what is left of ``TETRARCH_LAUNCHER_PID`` in
``os.environ`` (``-`` when nothing); with ``wait``, then wait for a signal.
"""

from __future__ import annotations

import os
import signal
import sys

from tetrarch._config import ENV_LAUNCHER_PID
from tetrarch._runtime.plumbing import _spawn


def launcher() -> None:
    _spawn._guards_itself = lambda argv: True  # this script stands for a core program
    child = _spawn.spawn_watched([sys.executable, __file__, "child", "wait"], dict(os.environ))
    print(child.pid, flush=True)
    sys.stdin.read()


def child() -> None:
    _spawn.die_with_launcher()
    print(os.environ.get(ENV_LAUNCHER_PID.name, "-"), flush=True)
    if sys.argv[2:] == ["wait"]:
        signal.pause()  # until killed: by the kernel when the launcher dies, or by the test


if __name__ == "__main__":
    {"launcher": launcher, "child": child}[sys.argv[1]]()
