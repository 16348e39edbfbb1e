"""Waiting for processes to end, as the supervision and leak tests do (psutil, imported on use)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["still_running"]


def still_running(pids: Iterable[int], timeout: float) -> list[int]:
    """Those of ``pids`` still running after waiting up to ``timeout`` s for all of them to end.

    A zombie (ended, not reaped yet: its parent may be stopped or gone) counts as ended, and so
    does a pid that no longer exists. Needs psutil (``tetrarch[test]``).
    """
    import psutil  # type: ignore[import-untyped]  # a test dependency without stubs

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=timeout)
    running = []
    for p in alive:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                running.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return running
