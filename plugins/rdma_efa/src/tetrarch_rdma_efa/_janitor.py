"""Removing libfabric ``shm`` segments that their processes could not remove (issue 28, item 9).

libfabric 1.17's ``shm`` provider gives each endpoint a 16 MiB segment ``/dev/shm/PID:EP:N``,
which ``fi_close`` removes. A process that is SIGKILLed, or interrupted where no ``atexit``
runs, leaves it behind. So the first ``shm`` endpoint of a process starts a *janitor*: a tiny
Python process in a session of its own (a terminal's Ctrl-C does not reach it) that waits for
the process to end (``pidfd_open``; without it, a look every second) and then removes that
pid's segments. It holds no pipe of the process (its output is ``/dev/null``) and ends as
soon as it has swept, so it outlives the process by milliseconds. When the process closes its
endpoints itself (the RDMA runtime's close, ``atexit``), it removes its segments and stops
its janitor (:func:`stop_janitor`).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading

from tetrarch.plugins import process_gone

from ._endpoint import shm_pid

__all__ = ["SEGMENT", "start_janitor", "stop_janitor", "sweep_dead_shm", "unlink_dead_shm"]

#: libfabric 1.17's shm provider names its segment ``/dev/shm/PID:EP:N``.
SEGMENT = re.compile(r"(\d+):\d+:\d+")

_JANITOR = r"""
import os, re, select, sys, time
pid = int(sys.argv[1])
try:
    fd = os.pidfd_open(pid)
    select.select([fd], [], [])
except OSError:
    while os.path.exists(f"/proc/{pid}") and not open(f"/proc/{pid}/stat").read().split(") ")[-1].startswith("Z"):
        time.sleep(1)
for name in os.listdir("/dev/shm"):
    m = re.fullmatch(r"(\d+):\d+:\d+", name)
    if m and int(m[1]) == pid:
        try:
            os.unlink("/dev/shm/" + name)
        except OSError:
            pass
"""

_janitor: tuple[int, subprocess.Popen[bytes]] | None = None  # (the pid it watches, the janitor)
_lock = threading.Lock()


def start_janitor() -> None:
    """Start this process's janitor, once per process. Never raises (without one, the next
    ``shm`` endpoint opened on this host still sweeps what dead processes left)."""
    global _janitor
    with _lock:
        if _janitor is not None and _janitor[0] == os.getpid() and _janitor[1].poll() is None:
            return  # (a forked child starts its own)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _janitor = os.getpid(), subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _JANITOR, str(os.getpid())], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True)


def stop_janitor() -> None:
    """Stop this process's janitor (its ``shm`` endpoints are closed and its segments removed:
    nothing is left for it to do). Never raises."""
    global _janitor
    with _lock:
        found, _janitor = _janitor, None
    if found is not None and found[0] == os.getpid():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            found[1].terminate()
            found[1].wait(timeout=5)


def unlink_dead_shm(name: bytes) -> None:
    """Remove a SIGKILLed shm owner's segment (``fi_shm://PID:...`` lives at ``/dev/shm/PID:...``),
    which it could not remove itself; only when no process ``PID`` exists. Never raises."""
    pid = shm_pid(name)
    if pid is None or not process_gone(pid):
        return  # not a shm name, or alive (or its pid reused): not ours to remove
    segment = name.rstrip(b"\0").decode(errors="replace").removeprefix("fi_shm://")
    with contextlib.suppress(OSError):
        os.unlink(f"/dev/shm/{segment}")


def sweep_dead_shm(including: int | None = None) -> None:
    """Remove the shm provider's segments of processes that no longer run, and those of the
    process ``including`` (this one, once its endpoints are closed). Never raises."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for name in names:
        match = SEGMENT.fullmatch(name)
        if match and (int(match.group(1)) == including or process_gone(int(match.group(1)))):
            with contextlib.suppress(OSError):
                os.unlink(f"/dev/shm/{name}")
