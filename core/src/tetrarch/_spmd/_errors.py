"""The errors of ``tetrarch.job.spmd``: the job failed (:class:`SPMDJobError`), or a run did (:class:`SPMDRunError`)."""

from __future__ import annotations

from typing import Any

from .._errors import TetrarchError
from ._reserve import RunOutcome

__all__ = ["SPMDJobError", "SPMDRunError"]


class SPMDJobError(TetrarchError, RuntimeError):
    """The job itself failed: its server could not start, is not running, or refused us."""


class SPMDRunError(TetrarchError, RuntimeError):
    """A run failed: a rank raised, exited with a status other than 0, or its proc died.

    ``rank`` (None if unknown), ``status`` (what a command line exits with: the rank's exit
    status, else 1), ``kind`` (``exception``, ``exit``, ``proc died``, ``cancelled``),
    ``error_type`` (the exception's class name) and ``remote_traceback`` (the rank's
    traceback text, for ``exception``) say what happened; the message carries them.
    """

    def __init__(self, message: str, *, rank: int | None = None, status: int = 1, kind: str = "",
                 error_type: str = "", remote_traceback: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.status = status
        self.kind = kind
        self.error_type = error_type
        self.remote_traceback = remote_traceback

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_run_error, (self.args[0], self.rank, self.status, self.kind, self.error_type,
                                     self.remote_traceback))

    @classmethod
    def from_outcome(cls, outcome: RunOutcome) -> SPMDRunError:
        who = f"rank {outcome.rank}" if outcome.rank is not None else "a rank"
        head = {"exception": f"{who} raised {outcome.error_type}: {outcome.message}",
                "exit": outcome.message, "proc died": f"the proc of {who} died: {outcome.message}"}
        text = head.get(outcome.kind, outcome.message)
        if outcome.traceback:
            text += "\nTraceback of the rank (most recent call last):\n" + \
                outcome.traceback.removeprefix("Traceback (most recent call last):\n")
        if outcome.replaced:
            text += "\n(the run's procs were killed; fresh ones serve the next run_spmd())"
        return cls(text, rank=outcome.rank, status=outcome.status, kind=outcome.kind,
                   error_type=outcome.error_type, remote_traceback=outcome.traceback)


def _rebuild_run_error(message: str, rank: int | None, status: int, kind: str, error_type: str,
                       tb: str) -> SPMDRunError:
    return SPMDRunError(message, rank=rank, status=status, kind=kind, error_type=error_type, remote_traceback=tb)
