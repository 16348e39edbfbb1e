"""What a process says of itself and its actors when asked (``proc``/``introspect``).

Built on demand from state the process keeps anyway (its runners, their mailboxes, the
frames of their threads): nothing on the path of a call is counted or timed for it. The
admin server (:mod:`tetrarch._admin`) asks every proc for this record over the router.
"""

from __future__ import annotations

import os
import resource
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from typing import Any

from ..plumbing._stop_guard import _runner_frame, class_name
from ._stats import EMPTY, counting, start_counting

__all__ = ["actor_record", "process_record", "rss_bytes", "thread_stacks"]

_HOST = socket.gethostname()
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident memory."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def actor_record(runner: Any, frames: dict[int, Any]) -> dict[str, Any]:
    """One actor (an ``ActorRunner``): its identity, state, queue and what it runs now."""
    instance = runner.instance
    tid = getattr(runner._thread, "ident", None)
    running, _ = _runner_frame(runner, frames.get(tid or -1))
    if not running:
        running = getattr(runner, "_running_method", "") or ""
    if runner.failed:
        state = "failed"
    elif runner.stopped:
        state = "stopped"
    elif running:
        state = "busy"
    else:
        state = "idle"
    return {
        "key": runner.key,
        "mesh": instance.name,
        "rank": instance.rank.rank,
        "point": str(instance.rank) if len(instance.rank) else "",
        "class": class_name(runner.cls),
        "state": state,
        "mailbox": len(runner._mailbox),
        "endpoint": running or None,
        "failure": runner.failed,
        **(runner.stats.snapshot() if runner.stats is not None else EMPTY),
    }


def process_record(role: str, name: str, transport: str, runners: Iterable[Any]) -> dict[str, Any]:
    """This process: pid, host, memory, CPU, threads, transport, and each of its actors."""
    runners = list(runners)
    if not counting():  # someone looks: count the actors' calls from now on
        start_counting(runners)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    frames = sys._current_frames()
    return {
        "pid": os.getpid(),
        "host": _HOST,
        "role": role,
        "name": name,
        "transport": transport,
        "rss_bytes": rss_bytes(),
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "threads": threading.active_count(),
        "time": time.time(),
        "actors": [actor_record(r, frames) for r in list(runners)],
    }


def thread_stacks(runners: Iterable[Any]) -> list[dict[str, Any]]:
    """Every Python thread of this process: its id, name, stack, and the actor it serves (if any)
    with what that actor runs; the actors' threads first."""
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    actor_of = {getattr(r._thread, "ident", None): r for r in list(runners)}
    rows = []
    for tid, frame in frames.items():
        runner = actor_of.get(tid)
        running = ""
        if runner is not None:
            running = _runner_frame(runner, frame)[0] or getattr(runner, "_running_method", "") or ""
        rows.append({"id": tid, "name": names.get(tid, "?"),
                     "actor": runner.display if runner is not None else None,
                     "endpoint": running or None,
                     "stack": "".join(traceback.format_stack(frame))})
    rows.sort(key=lambda r: (r["actor"] is None, r["name"]))
    return rows
