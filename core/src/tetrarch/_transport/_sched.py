"""A message library's helper threads run under ``SCHED_BATCH`` (``TETRARCH_BATCH_IO_THREADS``).

libzmq and nng move every message through threads of their own: libzmq's I/O thread
writes and reads the sockets; nng's poller thread reads, and its task threads complete
each step. A Python thread that sends wakes one of them, and a reply wakes them on the
way in. Under the kernel's default policy a thread that wakes up after sleeping preempts
whatever runs on the CPU it is placed on, often the thread that woke it: the sender is
switched out in the middle of its hand-off (often holding a lock the woken thread then waits for), and each message
costs several extra context switches. ``SCHED_BATCH`` is the same fair scheduling without
that wake-up preemption: a woken helper takes an idle CPU at once, or runs when the
thread that woke it blocks or its time slice ends.

On 2 cores the 8-proc round went from 1.12 to 0.93 ms on nng and from 0.85 to 0.76 ms on
zmq. The cost: on a host whose every CPU is busy, a helper waits for the running thread's
time slice to end (a few milliseconds) instead of preempting it. docs/performance.md has both.
"""

from __future__ import annotations

import os
import threading

from .._config import BATCH_IO_THREADS
from .._log import get_logger

__all__ = ["batch_helper_threads", "helper_thread_policy"]

_log = get_logger("transport")
_probe_lock = threading.Lock()
_usable: bool | None = None


def _probe() -> bool:
    """Whether this system lets a thread take ``SCHED_BATCH`` (tried on a throwaway thread)."""
    global _usable
    with _probe_lock:
        if _usable is None:
            why: list[str] = []

            def attempt() -> None:
                try:
                    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
                except (OSError, AttributeError) as exc:  # refused (a sandbox), or not Linux
                    why.append(str(exc) or type(exc).__name__)

            thread = threading.Thread(target=attempt, name="tetrarch-sched-probe", daemon=True)
            thread.start()
            thread.join()
            _usable = not why
            if why:
                _log.info("helper threads keep the default scheduling policy: SCHED_BATCH refused (%s)", why[0])
        return _usable


def helper_thread_policy() -> int | None:
    """``os.SCHED_BATCH`` for a message library's helper threads, or None: leave them as they are
    (``TETRARCH_BATCH_IO_THREADS=0``, or this system refuses the policy).

    A plugin whose library takes a thread policy itself (libzmq's ``ZMQ_THREAD_SCHED_POLICY``)
    passes it this value; others call :func:`batch_helper_threads` once the library's threads run.
    """
    if not BATCH_IO_THREADS() or not _probe():
        return None
    return int(os.SCHED_BATCH)


def batch_helper_threads(prefix: str) -> int:
    """Put this process's threads whose name starts with ``prefix`` (nng's ``"nng:"``) under
    :func:`helper_thread_policy`, and return how many were changed (0 when it is None).

    Never raises: a thread that ended meanwhile, or one the system refuses, keeps its policy.
    """
    policy = helper_thread_policy()
    if policy is None:
        return 0
    changed = 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:  # e.g. no descriptor left (EMFILE): leave the threads as they are
        return 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8", errors="replace") as f:
                if not f.read().startswith(prefix):
                    continue
            if os.sched_getscheduler(int(tid)) == os.SCHED_OTHER:  # never demote a real-time one
                os.sched_setscheduler(int(tid), policy, os.sched_param(0))
                changed += 1
        except OSError:  # the thread ended, or a policy the system refuses for it
            continue
    return changed
