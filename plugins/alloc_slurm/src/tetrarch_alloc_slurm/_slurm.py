"""The Slurm allocator: one host agent per node of a Slurm job, started by ``srun``.

Outside an allocation it submits a batch job whose script is one ``srun`` of the host
agents: when the agents end (the client stopped, or died and they lost its connection)
the step and then the job end, so nothing outlives the client. Inside an allocation
(``SLURM_JOB_ID`` set) it starts that ``srun`` as a step of it, from the client.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping

from tetrarch.plugins import get_logger
from tetrarch.plugins.allocator import (
    ENV_HOST_INDEX,
    Allocation,
    Allocator,
    AllocatorError,
    AllocRequest,
    ExitInfo,
    WatchedProcess,
    source_ip_toward,
    spawn_watched,
)

from . import _cli
from ._options import SlurmOptions, SlurmPlan, make_plan

__all__ = ["SlurmAllocation", "SlurmAllocator"]

_log = get_logger("slurm")
_POLL = 0.2  # seconds between squeue polls while waiting for the job to start
_WATCH = 1.0  # seconds between squeue polls of a running job


def _inside() -> str | None:
    """The id of the Slurm allocation this process runs in, if any."""
    return os.environ.get("SLURM_JOB_ID") or None


class SlurmAllocation(Allocation):
    """The host agents of one Slurm job (or one step of the enclosing allocation)."""

    def __init__(self, plan: SlurmPlan, jobid: str | None, step: WatchedProcess | None, secrets: list[str],
                 on_ended: Callable[[str], None]) -> None:
        self.plan = plan
        self.jobid = jobid  # None: a step of the enclosing allocation
        self._step = step
        self._secrets = secrets
        self._on_ended = on_ended
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    def watch(self) -> None:
        """Start reporting the agents ended when the job stops running (call once it runs)."""
        if self.jobid is not None:
            threading.Thread(target=self._watch, name=f"tetrarch-slurm-{self.jobid}", daemon=True).start()

    def _watch(self) -> None:
        """Report every agent ended once the job is no longer running (cancelled, failed, node lost)."""
        assert self.jobid is not None
        while not self._stopped.wait(_WATCH):
            try:
                state, reason = _cli.job_state(self.jobid)
            except AllocatorError as exc:
                _log.debug("cannot poll Slurm job %s: %s", self.jobid, exc)
                continue
            if state not in ("RUNNING", "CONFIGURING", "SUSPENDED"):
                self._on_ended(f"Slurm job {self.jobid} is {state.lower()}{f' ({reason})' if reason else ''}")
                return

    def stop(self, grace: float = 5.0) -> None:
        """Cancel the job (or end the step), wait until Slurm shows it ended, remove leftover secret files.

        Bounded by ``grace`` plus Slurm's KillWait for the job to leave the queue; a job
        still listed then is logged, never waited for without bound.
        """
        with self._lock:
            self._stopped.set()
            if self._step is not None:
                self._step.signal(signal.SIGTERM)  # srun forwards it to the agents
                if self._step.wait(max(grace, 0.0)) is None:
                    self._step.signal(signal.SIGKILL)
                    self._step.wait(5.0)
            if self.jobid is not None:
                with contextlib.suppress(AllocatorError):
                    _cli.run(["scancel", self.jobid], timeout=10.0)
                deadline = time.monotonic() + max(grace, 0.0) + 15.0  # KillWait (5 s here) + slurmctld's latency
                while time.monotonic() < deadline:
                    try:
                        state, _ = _cli.job_state(self.jobid)
                    except AllocatorError:
                        break
                    if state not in _cli.LIVE:
                        break
                    time.sleep(_POLL)  # polling Slurm's state: it has no event to wait on
                else:
                    _log.warning("Slurm job %s is still listed %g s after scancel", self.jobid, grace + 15.0)
            for path in self._secrets:
                with contextlib.suppress(OSError):
                    os.unlink(path)


class SlurmAllocator(Allocator):
    """Host agents on the nodes of a Slurm job: ``TETRARCH_ALLOCATOR=slurm`` or ``SlurmJob``.

    ``AllocRequest.options`` holds :class:`SlurmOptions` fields (``partition``,
    ``time_limit``, ``python_exe``, ...).
    """

    name = "slurm"
    spans_hosts = True

    def client_host(self, options: Mapping[str, object]) -> str | None:
        """``client_host`` from the options, else the local IP that routes to the first node.

        Raises:
            ArgumentError: the options are invalid.
        """
        opts = SlurmOptions.from_mapping(options)
        if opts.client_host:
            return opts.client_host
        addr = _cli.first_node_addr(opts.partition, os.environ.get("SLURM_JOB_NODELIST") if _inside() else None)
        return source_ip_toward(addr)

    def plan(self, request: AllocRequest, secret_stem: str = "<secret_dir>/<alloc>") -> SlurmPlan:
        """What :meth:`allocate` would run for ``request`` (nothing is submitted).

        Raises:
            ArgumentError: the options are invalid.
        """
        opts = SlurmOptions.from_mapping(request.options)
        env = {k: v for k, v in request.agent.env.items() if k != ENV_HOST_INDEX.name}
        return make_plan(opts, request.hosts, env, secret_stem, inside=_inside())

    def _allocate(self, request: AllocRequest, on_exit: Callable[[int, ExitInfo], None]) -> SlurmAllocation:
        """Submit the job (or start the step), and wait until the job runs.

        Raises:
            AllocatorError: sbatch failed, the job ended before it ran, or it stayed pending
                past ``job_start_timeout`` (the message holds the job id and Slurm's reason; the job is cancelled).
        """
        opts = SlurmOptions.from_mapping(request.options)
        secrets = _write_secrets(request, opts)
        try:
            plan = self.plan(request, secrets[0].rpartition(".")[0])
        except BaseException:
            _unlink(secrets)
            raise
        reported = threading.Event()

        def ended(why: str) -> None:
            if not reported.is_set():
                reported.set()
                for index in range(request.hosts):
                    on_exit(index, ExitInfo(-1, 1, why))

        if plan.sbatch_argv == ():
            try:
                step = spawn_watched(plan.srun_argv, plan.env,
                                     on_exit=lambda info: ended(f"srun ended ({info.describe()})\n{info.stderr_tail}"),
                                     cwd=opts.workdir)
            except OSError as exc:
                _unlink(secrets)
                raise AllocatorError(f"cannot start srun in allocation {_inside()}: {exc}") from exc
            return SlurmAllocation(plan, None, step, secrets, ended)
        try:
            jobid = _cli.run(plan.sbatch_argv, stdin=plan.script, env=plan.env, timeout=30.0).strip().split(";")[0]
        except BaseException:
            _unlink(secrets)
            raise
        allocation = SlurmAllocation(plan, jobid, None, secrets, ended)
        try:
            _wait_running(jobid, opts.job_start_timeout)
        except BaseException:
            allocation.stop(grace=1.0)
            raise
        allocation.watch()
        return allocation


def _wait_running(jobid: str, timeout: float) -> None:
    """Block until the job runs.

    Raises:
        AllocatorError: it ended first, or is still pending after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    state, reason = "PENDING", ""
    while time.monotonic() < deadline:
        state, reason = _cli.job_state(jobid)
        if state == "RUNNING":
            return
        if state not in _cli.LIVE:
            raise AllocatorError(f"Slurm job {jobid} ended before it ran: {state}"
                                 f"{f' ({reason})' if reason else ''}; see its output file")
        time.sleep(_POLL)  # polling Slurm's state: it has no event to wait on
    raise AllocatorError(f"Slurm job {jobid} was still {state} after job_start_timeout={timeout:g} s "
                         f"(Slurm's reason: {reason or 'none given'}); it was cancelled. Check the partition, "
                         f"time limit and resources (squeue -j {jobid}), or raise job_start_timeout")


def _write_secrets(request: AllocRequest, opts: SlurmOptions) -> list[str]:
    """One 0600 secret file per agent, ``<stem>.<rank>``, in ``opts.secret_dir`` (made 0700).

    Raises:
        AllocatorError: the directory or a file cannot be created.
    """
    try:
        os.makedirs(opts.secret_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise AllocatorError(f"cannot create the secret directory {opts.secret_dir!r} (SlurmJob secret_dir): "
                             f"{exc}") from exc
    first = request.agent.secret_file(opts.secret_dir)
    paths = [first + ".0"]
    os.rename(first, paths[0])
    try:
        for index in range(1, request.hosts):
            path = f"{first}.{index}"
            os.rename(request.agent.secret_file(opts.secret_dir), path)
            paths.append(path)
    except BaseException:
        _unlink(paths)
        raise
    return paths


def _unlink(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
