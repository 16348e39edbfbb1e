"""Thin wrappers over Slurm's command-line tools (sbatch, squeue, scancel, scontrol, sinfo)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

from tetrarch import AllocatorError

__all__ = ["first_node_addr", "job_state", "run"]

#: States in which a job still holds (or waits for) nodes.
LIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"})


def run(argv: Sequence[str], *, stdin: str | None = None, env: Mapping[str, str] | None = None,
        timeout: float = 10.0) -> str:
    """Run a Slurm tool; its stdout.

    Raises:
        AllocatorError: it is missing, timed out, or failed (the message holds its stderr).
    """
    try:
        res = subprocess.run(list(argv), input=stdin, env=dict(env) if env is not None else None,
                             capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise AllocatorError(f"{argv[0]} is not on PATH: run on a Slurm login node or install slurm-client") \
            from None
    except subprocess.TimeoutExpired:
        raise AllocatorError(f"{argv[0]} did not answer within {timeout:g} s (is slurmctld up? SLURM_CONF)") \
            from None
    if res.returncode != 0:
        raise AllocatorError(f"{' '.join(argv[:2])} failed (exit {res.returncode}): {res.stderr.strip()}")
    return res.stdout


def job_state(jobid: str) -> tuple[str, str]:
    """``(state, reason)`` of a job, e.g. ``("PENDING", "Resources")``; ``("GONE", "")`` once Slurm forgot it."""
    try:
        out = run(["squeue", "-h", "-j", jobid, "-o", "%T|%r"], timeout=10.0).strip()
    except AllocatorError as exc:
        if "Invalid job id" in str(exc):
            return "GONE", ""
        raise
    if not out:
        return "GONE", ""
    state, _, reason = out.splitlines()[0].partition("|")
    return state.strip(), reason.strip()


def first_node_addr(partition: str | None, nodelist: str | None = None) -> str | None:
    """``NodeAddr`` of the first node of ``nodelist``, else of ``partition`` (else any); ``None`` if unknown."""
    try:
        if nodelist:
            names = run(["scontrol", "show", "hostnames", nodelist], timeout=5.0).split()
        else:
            names = run(["sinfo", "-h", "-N", "-o", "%N", *(["-p", partition] if partition else [])],
                        timeout=5.0).split()
        if not names:
            return None
        out = run(["scontrol", "show", "node", names[0], "-o"], timeout=5.0)
    except AllocatorError:
        return None
    for word in out.split():
        if word.startswith("NodeAddr="):
            return word.partition("=")[2] or None
    return None
