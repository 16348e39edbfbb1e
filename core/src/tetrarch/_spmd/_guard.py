"""What a rank does when another rank of its run failed first: get out of the collective, or stop.

A rank told by its run's failure line (:mod:`._abort`) that another rank failed is usually
blocked where it can never finish: in a collective, a barrier, a store wait. What
torch.distributed permits (torch 2.13):

* gloo: a collective raises as soon as a peer's socket closes (the failed rank destroys its
  process group, or its process dies); ``abort`` of a gloo group does not wake a blocked
  collective, so nothing is attempted;
* NCCL: ``_abort_process_group()`` aborts the communicators and the blocked collective raises;
* anything else (a store wait, a pure-Python loop, a collective that does not notice): no
  way to interrupt it from outside.

So a rank that is still running :data:`GRACE_S` seconds after the abort, the process group
aborted, is stopped: its process writes one line to stderr saying why, and exits with
:data:`EXIT_STATUS`. Its owner sees the proc's death (a ``SupervisionError``) and replaces it.
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["EXIT_STATUS", "GRACE_S", "RunGuard"]

#: Seconds a rank may take to get out of its program after an abort before its process is stopped.
GRACE_S = 1.0
#: The exit status of a process stopped because another rank failed (EX_TEMPFAIL: rerun on fresh procs).
EXIT_STATUS = 75


def _abort_nccl_groups() -> None:
    """Abort the default process group if it is NCCL's (what wakes a blocked NCCL collective)."""
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d
    except ImportError:
        return
    with contextlib.suppress(Exception):
        if dist.is_available() and dist.is_initialized() and "nccl" in str(dist.get_backend()).lower():
            c10d._abort_process_group()


class RunGuard:
    """One rank's program while it runs: :meth:`on_abort` (another rank failed) stops it if it stays blocked."""

    def __init__(self, rank: int, grace: float = GRACE_S) -> None:
        self.rank = rank
        self.grace = grace
        self.running = True
        self.aborted: tuple[int, str] | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def on_abort(self, rank: int, cause: str) -> None:
        """Another rank (``rank``) failed with ``cause``: abort an NCCL group, stop the process after the grace."""
        with self._lock:
            if not self.running or self.aborted is not None:
                return
            self.aborted = (rank, cause)
        _abort_nccl_groups()
        timer = threading.Timer(self.grace, self._stop_if_blocked)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def finish(self) -> None:
        """The program returned or raised: nothing is stopped from now on."""
        with self._lock:
            self.running = False
        if self._timer is not None:
            self._timer.cancel()

    def _stop_if_blocked(self) -> None:
        with self._lock:
            if not self.running or self.aborted is None:
                return
            first, cause = self.aborted
            head = cause.strip().splitlines()[-1] if cause.strip() else "no cause given"
            message = (f"tetrarch.spmd: stopping rank {self.rank} (pid {os.getpid()}): rank {first} failed first "
                       f"({head}) and this rank was still blocked {self.grace:g} s later, in a collective or wait "
                       f"that can never finish; exit status {EXIT_STATUS}\n")
            with contextlib.suppress(OSError):
                os.write(2, message.encode("utf-8", "replace"))
            os._exit(EXIT_STATUS)
