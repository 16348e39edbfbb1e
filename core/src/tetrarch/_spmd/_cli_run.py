"""``tetrarch run``: torchrun's job on a tetrarch mesh, from the shell.

::

    tetrarch run [torchrun flags] train.py [args]          once, on fresh procs; exits with the job's status
    tetrarch run --serve [--state PATH] [torchrun flags] train.py [args]
                                                            reserve the procs (a job server) and return
    tetrarch run --job PATH [train.py args]                run the served job again (or another program)
    tetrarch run --job PATH --kill                         stop the served job

``--scheduler local|slurm`` (before the torchrun flags) picks where the hosts come from
(default ``local``: this machine; ``--nnodes=N`` makes N host agents here). Each rank's
lines are printed prefixed with its rank. The exit status is 0, the status a failing rank
gave ``sys.exit``, or 1 (2 for a command line that cannot run).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from ._errors import SPMDJobError, SPMDRunError
from ._torchrun import TorchrunCommand, check_program, parse_torchrun_args

__all__ = ["main"]

_WHO = "tetrarch run"
_OWN_VALUE = ("--state", "--job", "--scheduler")
_OWN_SWITCHES = ("--serve", "--kill")


@dataclass
class _Options:
    serve: bool = False
    kill: bool = False
    state: str | None = None
    job: str | None = None
    scheduler: str = "local"
    rest: list[str] = field(default_factory=list)


def _parse(argv: Sequence[str]) -> _Options:
    """tetrarch's own flags (first), then the rest. Raises ValueError for a misuse."""
    opts = _Options()
    args = list(argv)
    while args and (args[0] in _OWN_SWITCHES or args[0].partition("=")[0] in _OWN_VALUE):
        flag, eq, value = args.pop(0).partition("=")
        if flag in _OWN_SWITCHES:
            setattr(opts, flag[2:], True)
            continue
        if not eq:
            if not args:
                raise ValueError(f"{flag} needs a value")
            value = args.pop(0)
        setattr(opts, flag[2:], value)
    opts.rest = args
    if opts.scheduler not in ("local", "slurm"):
        raise ValueError(f"--scheduler {opts.scheduler!r}: choose local or slurm")
    if opts.kill and opts.job is None:
        raise ValueError("--kill stops a served job: pass --job PATH (the state file --serve printed)")
    if opts.job is not None and (opts.serve or opts.state is not None):
        raise ValueError("--job runs a job served already; --serve and --state start a new one: use one or the other")
    if opts.kill and opts.rest:
        raise ValueError(f"--kill takes no program, got {opts.rest}")
    return opts


def run_once(cmd: TorchrunCommand, scheduler: str) -> int:
    """Run ``cmd`` once on fresh procs in this process; the exit status (0, the rank's status, or 1)."""
    from .._runtime.services._supervision import set_unhandled_fault_hook
    from ._proc_side import Executable
    from ._reserve import Reservation, make_job

    set_unhandled_fault_hook(lambda failure: None)  # a failed run is reported below, from its outcome
    job = make_job(scheduler, cmd.nnodes, {})
    try:
        res = Reservation(job.state().workers, cmd.nproc_per_node)
        res.start()
        try:
            outcome = res.run(Executable(cmd.program) if cmd.no_python else list(cmd.program))
        finally:
            res.stop()  # (ranks that still ran after a failure were killed by run())
    finally:
        job.kill()
    if outcome.ok:
        return 0
    print(f"{_WHO}: {SPMDRunError.from_outcome(outcome)}", file=sys.stderr)
    return outcome.status or 1


def _rerun(opts: _Options) -> int:
    from ._job import job_load

    assert opts.job is not None
    job = job_load(opts.job)
    if opts.kill:
        job.kill()
        print(f"{_WHO}: stopped the job of {job.state_path} (pid {job.pid})")
        return 0
    try:
        job.run_spmd(opts.rest or None)
    except SPMDRunError as exc:
        print(f"{_WHO}: {exc}", file=sys.stderr)
        return exc.status or 1
    return 0


def main(argv: Sequence[str]) -> int:
    """``tetrarch run ARGS``; the exit status."""
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    try:
        opts = _parse(argv)
        if opts.job is not None:
            return _rerun(opts)
        cmd = parse_torchrun_args(opts.rest, who=_WHO)
        if opts.serve:
            from ._job import serve

            job = serve(["torchrun", *opts.rest], scheduler=opts.scheduler, state_path=opts.state)
            print(f"{_WHO}: served {job.world_size} ranks (job server pid {job.pid}); state {job.state_path}\n"
                  f"  run again:  tetrarch run --job {job.state_path} [program args]\n"
                  f"  stop:       tetrarch run --job {job.state_path} --kill")
            return 0
        check_program(cmd)
        return run_once(cmd, opts.scheduler)
    except (ValueError, FileNotFoundError, PermissionError, ModuleNotFoundError) as exc:
        print(f"{_WHO}: {exc}", file=sys.stderr)
        return 2
    except (SPMDJobError, TimeoutError) as exc:
        print(f"{_WHO}: {exc}", file=sys.stderr)
        return 1
