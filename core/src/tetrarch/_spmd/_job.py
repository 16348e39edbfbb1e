"""``serve()``, :class:`SPMDJob`, ``job_load()``: a torchrun command reserved once, run many times.

``serve(["torchrun", "--nproc-per-node=4", "--standalone", "train.py"])`` checks the command
here (before anything starts), then starts a detached job server (``_server``) that owns the
procs and writes a state file. ``SPMDJob.run_spmd()`` (in this process, or in a later one
after ``job_load(path)``) connects to the server's Unix socket, authenticates with the token
from the state file, and prints the ranks' lines as they come. See docs/spmd.md.
"""

from __future__ import annotations

import json
import os
import select
import socket
import stat
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from . import _control
from ._errors import SPMDJobError, SPMDRunError
from ._launch import launch_server
from ._reserve import RunOutcome
from ._target import check_target
from ._torchrun import TorchrunCommand, check_program, parse_torchrun

__all__ = ["DEFAULT_STATE_PATH", "SPMDJob", "SPMDJobError", "SPMDRunError", "job_load", "serve"]

#: Where ``serve()`` writes the job's state when no ``state_path`` is given (relative to the current directory).
DEFAULT_STATE_PATH = os.path.join(".tetrarch", "spmd_job.json")
#: Seconds ``serve()`` waits for the server to have its ranks up (Slurm may queue the job).
START_TIMEOUT = 600.0
#: Seconds a connection to the server may take, and a kill to finish.
CONNECT_TIMEOUT = 10.0
KILL_TIMEOUT = 120.0
SCHEDULERS = ("local", "slurm")
_STATE_KEYS = ("version", "pid", "socket", "token", "cwd", "command", "nnodes", "nproc_per_node")


@dataclass(frozen=True, slots=True)
class _State:
    """The state file's contents: how to reach the job's server."""

    path: str
    pid: int
    socket: str
    token: str
    cwd: str
    command: tuple[str, ...]
    nnodes: int
    nproc_per_node: int
    log: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"version": _control.VERSION, "pid": self.pid, "socket": self.socket, "token": self.token,
                "cwd": self.cwd, "command": list(self.command), "nnodes": self.nnodes,
                "nproc_per_node": self.nproc_per_node, "log": self.log}


def _read_state(path: str) -> _State:
    """Raises FileNotFoundError, PermissionError (readable by others), SPMDJobError (malformed)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise FileNotFoundError(f"no SPMD job state at {path!r}: serve() a job first, or pass the state_path it "
                                "used") from None
    with os.fdopen(fd) as f:
        if os.fstat(f.fileno()).st_mode & 0o077:
            raise PermissionError(f"the SPMD job state {path!r} holds the job's secret but others may read it: "
                                  f"chmod 600 {path}")
        try:
            data = json.load(f)
            if not isinstance(data, dict) or any(k not in data for k in _STATE_KEYS):
                raise ValueError(f"missing keys {[k for k in _STATE_KEYS if k not in data]}")
            return _State(path, int(data["pid"]), str(data["socket"]), str(data["token"]), str(data["cwd"]),
                          tuple(data["command"]), int(data["nnodes"]), int(data["nproc_per_node"]),
                          str(data.get("log", "")))
        except (ValueError, TypeError) as exc:
            raise SPMDJobError(f"{path!r} is no SPMD job state ({exc}); serve() the job again") from None


def _write_state(path: str, data: dict[str, Any]) -> None:
    _private_dir(os.path.dirname(path))
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def _private_dir(path: str) -> None:
    """Make ``path`` (mode 0700, parents too); an existing folder must be ours and not open to others' writes.

    Raises:
        PermissionError: the folder belongs to another user, or others may replace files in it.
    """
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o700, exist_ok=True)
        return
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise PermissionError(f"{path!r} belongs to another user; pass a state_path in a folder of yours")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise PermissionError(f"others may replace files in {path!r} (mode {stat.filemode(st.st_mode)}); pass a "
                              f"state_path in a private folder (the default, ./.tetrarch, is made with mode 0700)")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_pid_gone(pid: int, timeout: float) -> bool:
    """Wait until process ``pid`` (not necessarily our child) ended; whether it did within ``timeout``."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (AttributeError, OSError):  # no pidfd (old kernel, not Linux): look now and then
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return not _pid_alive(pid)
    try:
        readable, _, _ = select.select([pidfd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(pidfd)


class SPMDJob:
    """A served torchrun job: its procs stay up between :meth:`run_spmd` calls (Monarch's ``SPMDJob``).

    Made by :func:`serve` or :func:`job_load`; any number of processes may hold one for the
    same state file (runs follow each other). ``with serve(...) as job:`` kills it on exit.
    """

    def __init__(self, state: _State) -> None:
        self._state = state

    @property
    def state_path(self) -> str:
        """The state file: pass it to :func:`job_load` in another process."""
        return self._state.path

    @property
    def pid(self) -> int:
        """The job server's process id."""
        return self._state.pid

    @property
    def world_size(self) -> int:
        """``nnodes * nproc_per_node``."""
        return self._state.nnodes * self._state.nproc_per_node

    @property
    def command(self) -> list[str]:
        """The torchrun command line the job was served with."""
        return list(self._state.command)

    def _connect(self, timeout: float = CONNECT_TIMEOUT) -> socket.socket:
        """An authenticated connection to the server.

        Raises:
            SPMDJobError: the server is not running (or not reachable), or refused the token.
        """
        st = self._state
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(st.socket)
            _control.send(sock, _control.Hello(st.token))
            reply = _control.recv(sock, _control.MAX_FRAME, _control.Reply)
        except (OSError, _control.ProtocolError) as exc:
            sock.close()
            alive = "is not running" if not _pid_alive(st.pid) else "does not answer"
            raise SPMDJobError(f"the SPMD job server (pid {st.pid}, state {st.path!r}) {alive} ({exc}); serve() the "
                               f"job again{f' (its log: {st.log})' if st.log else ''}") from None
        if not reply.ok:
            sock.close()
            raise SPMDJobError(f"the SPMD job server (pid {st.pid}) refused the connection: {reply.error}")
        return sock

    def status(self) -> dict[str, Any]:
        """The server's view: ``pid``, ``world_size``, ``proc_pids``, ``host_pids``, ``runs``, ``generation``.

        Raises:
            SPMDJobError: the server is not running or refused us.
        """
        with self._connect() as sock:
            try:
                _control.send(sock, _control.StatusRequest())
                reply = _control.recv(sock, _control.MAX_FRAME, _control.Reply)
            except (OSError, _control.ProtocolError) as exc:
                raise SPMDJobError(f"the SPMD job server (pid {self.pid}) went away: {exc}") from None
        return dict(reply.data)

    def _program(self, script_args: Sequence[str] | None) -> tuple[list[str] | None, bool]:
        no_python = "--no-python" in self._state.command or "--no_python" in self._state.command
        if script_args is None:
            return None, no_python
        if isinstance(script_args, (str, bytes)) or not isinstance(script_args, Sequence):
            raise ValueError(f"script_args must be a list such as ['train.py', '--lr', '0.1'], got {script_args!r}")
        args = [str(a) for a in script_args]
        if no_python:
            check_program(TorchrunCommand(1, 1, tuple(args), no_python=True))
        else:
            check_target(args)
        first = 1 if args[0] == "-m" else 0
        if first == 0 and not os.path.isabs(args[0]) and os.getcwd() != self._state.cwd and \
                (not no_python or os.sep in args[0]):
            args[0] = os.path.abspath(args[0])  # the ranks run in the job's directory, not ours
        return args, no_python

    def run_spmd(self, script_args: Sequence[str] | None = None, *, timeout: float | None = None) -> None:
        """Run the job's program (or ``script_args``) on its ranks, printing their lines here; return when all end.

        ``script_args``: another program for this run, on the same ranks (``["train.py", "--lr",
        "0.2"]``, ``["-m", "pkg.train"]``; an executable's argv for a ``--no-python`` job).
        Each rank's line is printed to this process's stdout or stderr, prefixed with the rank.

        Raises:
            ValueError, FileNotFoundError, ModuleNotFoundError: ``script_args`` cannot run (checked here).
            SPMDRunError: a rank raised, exited with a status other than 0, or its proc died
                (the message names the rank and carries its traceback); the next run works.
            TimeoutError: not done within ``timeout`` seconds (the run was cancelled).
            SPMDJobError: the job server is not running or refused us.
        """
        program, no_python = self._program(script_args)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._connect() as sock:
            try:
                _control.send(sock, _control.RunRequest(program, no_python))
                outcome = self._follow(sock, deadline)
            except TimeoutError:
                raise TimeoutError(f"run_spmd() did not finish within {timeout} s; the run was cancelled (its procs "
                                   "are replaced for the next run)") from None
            except (OSError, _control.ProtocolError) as exc:
                raise SPMDJobError(f"the SPMD job server (pid {self.pid}) went away during the run: {exc}") from None
        if not outcome.ok:
            raise SPMDRunError.from_outcome(outcome)

    @staticmethod
    def _follow(sock: socket.socket, deadline: float | None) -> RunOutcome:
        """Print the run's lines until its outcome arrives."""
        while True:
            sock.settimeout(None if deadline is None else max(0.001, deadline - time.monotonic()))
            msg = _control.recv(sock, _control.MAX_FRAME, (_control.Output, _control.RunDone))
            if isinstance(msg, _control.RunDone):
                return RunOutcome.from_dict(msg.outcome)
            stream = sys.stderr if msg.fd == 2 else sys.stdout
            try:
                stream.write(msg.line)
                stream.flush()
            except (OSError, ValueError):
                pass  # our own stdout is closed (a reader that went away): the run goes on

    def kill(self) -> None:
        """Stop the job: its ranks' procs, its host agents and its server; remove the state file.

        A job whose server is already gone is a no-op (its state file is removed).

        Raises:
            SPMDJobError: the server did not end within its bounds.
        """
        st = self._state
        try:
            sock = self._connect()
        except SPMDJobError:
            if not _pid_alive(st.pid):
                self._remove_state()
                return
            raise
        with sock:
            try:
                sock.settimeout(KILL_TIMEOUT)
                _control.send(sock, _control.KillRequest())
                _control.recv(sock, _control.MAX_FRAME, _control.Reply)
            except (OSError, _control.ProtocolError):
                pass  # it may end before its answer arrives: its exit below is what counts
        if not _wait_pid_gone(st.pid, KILL_TIMEOUT):
            raise SPMDJobError(f"the SPMD job server (pid {st.pid}) did not end within {KILL_TIMEOUT} s of its kill")
        self._remove_state()

    def _remove_state(self) -> None:
        try:
            with open(self._state.path) as f:
                ours = json.load(f).get("token") == self._state.token
        except (OSError, ValueError):
            return
        if ours:
            try:
                os.unlink(self._state.path)
            except OSError:
                pass

    def dump(self, path: str) -> None:
        """Write the job's state to ``path`` too (mode 0600, folder 0700): :func:`job_load` it from there."""
        _write_state(os.path.abspath(path), self._state.as_json())

    def __enter__(self) -> SPMDJob:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.kill()

    def __repr__(self) -> str:
        return f"SPMDJob(pid={self.pid}, world_size={self.world_size}, state_path={self.state_path!r})"


def job_load(path: str = DEFAULT_STATE_PATH) -> SPMDJob:
    """The job served with state file ``path`` (by this process or another), checked to be running.

    Raises:
        FileNotFoundError: no state file at ``path``.
        PermissionError: the state file is readable by others (the message says how to fix it).
        SPMDJobError: the file is no job state, or its server is not running or refused us.
    """
    job = SPMDJob(_read_state(os.path.abspath(path)))
    job.status()
    return job


def serve(command: Sequence[str], scheduler: str = "local", scheduler_cfg: Mapping[str, Any] | None = None,
          env: Mapping[str, str] | None = None, state_path: str | None = None, *,
          start_timeout: float = START_TIMEOUT) -> SPMDJob:
    """Reserve the hosts and ranks of a torchrun ``command`` and return the job; run it with ``run_spmd()``.

    ``command``: ``["torchrun", "--nproc-per-node=4", "--standalone", "train.py", *args]`` (or
    ``["python", "-m", "torch.distributed.run", ...]``). ``scheduler``: ``"local"`` (this
    machine; ``--nnodes=N`` > 1 makes N host agents here, as ``ProcessJob`` does) or
    ``"slurm"`` (``SlurmJob`` with ``--nnodes`` nodes; ``scheduler_cfg`` holds its options,
    e.g. ``{"partition": "gpu", "time_limit": "1:00:00"}``). ``env``: extra environment
    variables for the server and every rank. ``state_path``: where the state goes
    (default ``./.tetrarch/spmd_job.json``; mode 0600 in a 0700 folder). The server is
    detached: it outlives this process until ``kill()``.

    Raises:
        ValueError: the command is no torchrun command, uses an unsupported flag (named), asks
            for zero ranks or an elastic ``--nnodes``; an unknown scheduler; bad ``scheduler_cfg``
            or ``env``; a world size the allocation cannot give.
        FileNotFoundError, ModuleNotFoundError: the script, module or executable is not there.
        SPMDJobError: a job is already served at ``state_path``, or the server could not start
            the job (the message carries its error and log).
        TimeoutError: the job was not up within ``start_timeout`` seconds (it was stopped).
    """
    cmd = parse_torchrun(command)
    check_program(cmd)
    cfg = _check_scheduler(scheduler, scheduler_cfg, cmd)
    extra_env = _check_env(env)
    path = os.path.abspath(state_path or DEFAULT_STATE_PATH)
    _private_dir(os.path.dirname(path))
    if os.path.exists(path):
        _refuse_if_served(path)
    spec = {"command": list(command), "scheduler": scheduler, "scheduler_cfg": cfg, "nnodes": cmd.nnodes,
            "nproc_per_node": cmd.nproc_per_node, "program": list(cmd.program), "no_python": cmd.no_python,
            "state_path": path, "cwd": os.getcwd(), "sys_path": [p for p in sys.path if p]}
    launch_server(spec, {**os.environ, **extra_env}, start_timeout)
    return SPMDJob(_read_state(path))


def _refuse_if_served(path: str) -> None:
    try:
        old = SPMDJob(_read_state(path))
        old.status()
    except (SPMDJobError, PermissionError, FileNotFoundError):
        warnings.warn(f"removing the state of an SPMD job that is no longer served: {path}", stacklevel=3)
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    raise SPMDJobError(f"an SPMD job is already served from {path} (pid {old.pid}): reuse it with "
                       f"job_load({path!r}), kill it (job_load(path).kill()), or pass another state_path")


def _check_scheduler(scheduler: str, cfg: Mapping[str, Any] | None, cmd: TorchrunCommand) -> dict[str, Any]:
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler {scheduler!r} is not supported; choose one of {list(SCHEDULERS)}")
    if cfg is not None and not isinstance(cfg, Mapping):
        raise ValueError(f"scheduler_cfg must be a dict of options, got {cfg!r}")
    cfg = dict(cfg or {})
    if scheduler == "local":
        if cfg:
            raise ValueError(f"scheduler 'local' takes no scheduler_cfg (got {sorted(cfg)}); use scheduler='slurm' "
                             "for Slurm options")
        return cfg
    try:
        json.dumps(cfg)
    except TypeError as exc:
        raise ValueError(f"scheduler_cfg must hold JSON values (strings, numbers, lists): {exc}") from None
    from tetrarch.job import SlurmJob

    try:
        SlurmJob({"workers": cmd.nnodes}, **cfg)
    except TypeError as exc:
        raise ValueError(f"scheduler_cfg for slurm: {exc}; its keys are SlurmJob's options (partition, time_limit, "
                         "gpus_per_node, ...; docs/slurm.md)") from None
    inside = os.environ.get("SLURM_JOB_NUM_NODES")
    if inside and inside.isdigit() and int(inside) < cmd.nnodes:
        raise ValueError(f"--nnodes={cmd.nnodes} but this Slurm allocation has {inside} nodes "
                         f"(SLURM_JOB_NUM_NODES): pass --nnodes={inside} or allocate more nodes")
    return cfg


def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError(f"env must map variable names to strings, got {env!r}")
    return dict(env)
