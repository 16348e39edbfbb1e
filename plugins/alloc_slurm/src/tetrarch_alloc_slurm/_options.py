"""The options of a Slurm allocation, validated once, and the plan they make (sbatch script, srun line)."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from tetrarch import ArgumentError, ArgumentTypeError
from tetrarch.plugins.allocator import ENV_SECRET_FILE, HOST_AGENT_MODULE

__all__ = ["SlurmOptions", "SlurmPlan", "make_plan"]


@dataclass(frozen=True)
class SlurmOptions:
    """How to ask Slurm for nodes (Monarch's ``SlurmJob`` arguments, plus where things run).

    ``python_exe`` and ``workdir`` are the interpreter and working directory on the
    nodes (default: this interpreter and directory: a shared file system).
    ``secret_dir`` holds the per-agent 0600 secret files and must be visible on the
    nodes (default ``~/.cache/tetrarch/slurm``); ``log_dir`` holds Slurm's output file
    (default: the same). ``client_host`` is the IP the client listens on (default:
    the local address that routes to the partition's first node). ``job_start_timeout``
    bounds the time the job may stay pending (seconds).
    """

    partition: str | None = None
    time_limit: str | None = None
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    account: str | None = None
    qos: str | None = None
    slurm_args: tuple[str, ...] = ()
    python_exe: str = field(default_factory=lambda: sys.executable)
    workdir: str = field(default_factory=os.getcwd)
    secret_dir: str = field(default_factory=lambda: os.path.expanduser("~/.cache/tetrarch/slurm"))
    log_dir: str | None = None
    client_host: str | None = None
    job_start_timeout: float = 300.0
    job_name: str = "tetrarch"

    def __post_init__(self) -> None:
        for name in ("partition", "time_limit", "mem", "account", "qos", "log_dir", "client_host"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip() or "\n" in value):
                raise ArgumentTypeError(f"SlurmJob {name} must be a non-empty one-line string, got {value!r}")
        for name in ("gpus_per_node", "cpus_per_task"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ArgumentError(f"SlurmJob {name} must be a positive int, got {value!r}")
        if isinstance(self.slurm_args, str) or not all(isinstance(a, str) for a in self.slurm_args):
            raise ArgumentTypeError(f"SlurmJob slurm_args must be a list of strings such as ['--exclusive'], "
                                    f"got {self.slurm_args!r}")
        object.__setattr__(self, "slurm_args", tuple(self.slurm_args))
        if isinstance(self.job_start_timeout, bool) or not isinstance(self.job_start_timeout, int | float) \
                or not self.job_start_timeout > 0:
            raise ArgumentError(f"SlurmJob job_start_timeout must be a positive number of seconds, "
                                f"got {self.job_start_timeout!r}")
        for name in ("python_exe", "workdir", "secret_dir", "job_name"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or "\n" in value:
                raise ArgumentTypeError(f"SlurmJob {name} must be a non-empty one-line string, got {value!r}")

    @classmethod
    def from_mapping(cls, options: Mapping[str, object]) -> SlurmOptions:
        """Options from an ``AllocRequest.options`` mapping (``AllocatorJob(..., options=...)``).

        Raises:
            ArgumentError: an unknown key (the message lists the known ones) or a bad value.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ArgumentError(f"unknown Slurm option(s) {unknown}; known: {sorted(known)}")
        return cls(**options)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SlurmPlan:
    """What a Slurm allocation runs: ``sbatch_argv`` submits ``script``, whose last line is ``srun_argv``.

    Inside an existing allocation only ``srun_argv`` runs (from the client). No line holds
    the allocation's secret: each agent reads ``<secret_dir>/<alloc>.<rank>`` (0600) and deletes it.
    """

    sbatch_argv: tuple[str, ...]
    script: str
    srun_argv: tuple[str, ...]
    env: Mapping[str, str]


def _sbatch_directives(opts: SlurmOptions, nodes: int, output: str) -> list[str]:
    lines = [f"--job-name={opts.job_name}", f"--nodes={nodes}", "--ntasks-per-node=1", f"--output={output}",
             f"--chdir={opts.workdir}"]
    for flag, value in (("--partition", opts.partition), ("--time", opts.time_limit),
                        ("--gpus-per-node", opts.gpus_per_node), ("--cpus-per-task", opts.cpus_per_task),
                        ("--mem", opts.mem), ("--account", opts.account), ("--qos", opts.qos)):
        if value is not None:
            lines.append(f"{flag}={value}")
    lines.extend(opts.slurm_args)
    return lines


def srun_line(opts: SlurmOptions, nodes: int, secret_stem: str, jobid: str | None = None) -> tuple[str, ...]:
    """The srun command that starts one host agent per node (each reads ``secret_stem.<SLURM_PROCID>``)."""
    # What each task runs: core's host agent, reading its own secret file, named by its rank.
    wrapper = (f'export {ENV_SECRET_FILE.name}={shlex.quote(secret_stem)}."$SLURM_PROCID"; '
               f'exec {shlex.quote(opts.python_exe)} -m {HOST_AGENT_MODULE}')
    argv = ["srun"]
    if jobid is not None:
        argv.append(f"--jobid={jobid}")
    argv += [f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
             "--export=ALL", f"--chdir={opts.workdir}", "--job-name=tetrarch-agents", "/bin/sh", "-c", wrapper]
    return tuple(argv)


def make_plan(opts: SlurmOptions, nodes: int, env: Mapping[str, str], secret_stem: str,
              inside: str | None = None) -> SlurmPlan:
    """The plan for ``nodes`` host agents with environment ``env`` (never holding the secret).

    ``inside``: the id of an existing allocation (``SLURM_JOB_ID``) to start a step in; no sbatch then.
    """
    srun = srun_line(opts, nodes, secret_stem, jobid=inside)
    if inside is not None:
        return SlurmPlan((), "", srun, dict(env))
    output = os.path.join(opts.log_dir or opts.secret_dir, "slurm-%j.out")
    directives = "".join(f"#SBATCH {shlex.quote(d)}\n" for d in _sbatch_directives(opts, nodes, output))
    script = ("#!/bin/sh\n" + directives +
              "# tetrarch: one host agent per node; they connect back to the client and end with it.\n"
              "# The environment comes from sbatch (--export=ALL); the secret is in per-agent 0600 files.\n"
              f"exec {shlex.join(srun)}\n")
    return SlurmPlan(("sbatch", "--parsable", "--export=ALL"), script, srun, dict(env))
