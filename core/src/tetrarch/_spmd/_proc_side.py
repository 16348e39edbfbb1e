"""What a reserved rank runs in its proc: :class:`ServedRank` and the ``--no-python`` executable.

Imported by the procs of a reservation (``_reserve``); kept small, without torch at import.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from .._runtime.actors._actor import endpoint
from ._actor import SPMDActor
from ._target import RankExitError

__all__ = ["Executable", "ServedRank", "output_mark"]

_PR_SET_PDEATHSIG = 1


def output_mark(token: str, fd: int) -> str:
    """The line a rank writes to ``fd`` so that its reader knows every earlier line arrived."""
    return f"\x1etetrarch-spmd-mark {token} {fd}"


class ServedRank(SPMDActor):
    """:class:`SPMDActor` with what a reservation needs between runs."""

    @endpoint
    def warm(self) -> None:
        """Import ``torch.distributed`` now, so that the first run does not pay for it."""
        import torch.distributed  # noqa: F401

    @endpoint
    def mark(self, token: str) -> None:
        """Write :func:`output_mark` to stdout and stderr (after what the program wrote there)."""
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            stream.flush()
            os.write(fd, (output_mark(token, fd) + "\n").encode())


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Have the kernel SIGKILL the child when the proc dies (Linux ``PR_SET_PDEATHSIG``)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True, slots=True)
class Executable:
    """A ``--no-python`` program: ``argv`` run as a subprocess of the rank's proc, with torchrun's variables.

    Passed to ``SPMDActor.main`` as its callable; its output goes to the proc's stdout and
    stderr (so it reaches the caller prefixed with the rank). If the proc dies, so does the
    child (``PR_SET_PDEATHSIG``).
    """

    argv: tuple[str, ...]

    def __call__(self) -> bool:
        """Run ``argv`` to its end; ``True`` when it exits with status 0.

        Raises:
            RankExitError: it exited with another status (a signal ``N`` counts as ``128 + N``, as in a shell).
            FileNotFoundError, PermissionError: it cannot be started here.
        """
        sys.stdout.flush()
        sys.stderr.flush()
        preexec = _die_with_parent if sys.platform == "linux" else None
        code = subprocess.call(list(self.argv), env=os.environ.copy(), preexec_fn=preexec)
        if code == 0:
            return True
        rank = int(os.environ.get("RANK", "0"))
        if code < 0:
            raise RankExitError(rank, 128 - code, f"{self.argv[0]} was killed by signal {-code}")
        raise RankExitError(rank, code, f"{self.argv[0]} exited with status {code}")
