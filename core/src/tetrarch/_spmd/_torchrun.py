"""A torchrun command line, parsed into what ``tetrarch.job.spmd`` runs (pure, no procs).

``["torchrun", "--nproc-per-node=4", "--standalone", "train.py", "--lr", "0.1"]`` (or
``["python", "-m", "torch.distributed.run", ...]``) becomes a :class:`TorchrunCommand`:
how many hosts (``--nnodes``), how many ranks per host (``--nproc-per-node``) and the
program (a script, ``-m module`` or, with ``--no-python``, an executable). torchrun's
flags that tetrarch honours are read; flags that only steer torchrun's own rendezvous
(``--rdzv-*``, ``--master-*``, ``--node-rank``) are accepted and ignored, because
tetrarch does its own race-free rendezvous (docs/spmd.md); every other flag is refused
by name with the reason, so a command line never silently means something else here.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ._target import check_target

__all__ = ["TorchrunCommand", "check_program", "parse_torchrun", "parse_torchrun_args"]

#: Flags that take a value and that tetrarch reads.
_VALUE_FLAGS = ("nnodes", "nproc-per-node")
#: Flags that take a value and are accepted but ignored: tetrarch makes its own rendezvous.
_IGNORED_VALUE_FLAGS = ("rdzv-endpoint", "rdzv-backend", "rdzv-id", "master-addr", "master-port", "node-rank")
#: Switches (no value) that tetrarch reads; ``--run-path`` is what a script run is anyway.
_SWITCHES = ("standalone", "module", "no-python", "run-path")
_SHORT = {"-m": "module"}

#: torchrun flags refused, with why and what to do instead.
_REFUSED = {
    "max-restarts": "a failed run raises in the caller; call run_spmd() again to rerun (tetrarch replaces the "
                    "procs of a failed run)",
    "monitor-interval": "tetrarch's supervision watches the ranks; there is no agent polling interval",
    "start-method": "ranks run in tetrarch procs, not in multiprocessing children",
    "role": "ROLE_NAME is torchrun's default ('default')",
    "rdzv-conf": "tetrarch does its own rendezvous (its store is started by rank 0's proc)",
    "log-dir": "each rank's output reaches the caller, prefixed with its rank",
    "redirects": "each rank's output reaches the caller, prefixed with its rank",
    "tee": "each rank's output reaches the caller, prefixed with its rank",
    "local-ranks-filter": "each rank's output reaches the caller, prefixed with its rank",
    "logs-specs": "each rank's output reaches the caller, prefixed with its rank",
    "local-addr": "tetrarch picks each rank's address itself",
    "numa-binding": "not implemented",
    "event-log-handler": "not implemented",
    "signals-to-handle": "not implemented",
    "virtual-local-rank": "not implemented",
}
_SHORT_REFUSED = {"-r": "redirects", "-t": "tee"}

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
_RUN_MODULES = ("torch.distributed.run", "torchrun")


@dataclass(frozen=True, slots=True)
class TorchrunCommand:
    """What a torchrun command line asks for.

    ``program``: the script and its arguments (``["train.py", *args]``), ``["-m", module,
    *args]``, or with ``no_python`` the executable and its arguments. ``ignored``: the
    flags that were accepted but have no effect here (``--rdzv-endpoint`` ...).
    """

    nnodes: int
    nproc_per_node: int
    program: tuple[str, ...]
    no_python: bool = False
    standalone: bool = False
    ignored: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        """``nnodes * nproc_per_node``: the number of ranks."""
        return self.nnodes * self.nproc_per_node


def parse_torchrun(command: Sequence[str], *, who: str = "tetrarch.job.spmd.serve") -> TorchrunCommand:
    """Parse ``["torchrun", *flags, script, *args]`` or ``["python", "-m", "torch.distributed.run", ...]``.

    Raises:
        ValueError: ``command`` is not a list of strings starting with torchrun (or python -m
            torch.distributed.run), names no program, or uses a flag or value that is not
            supported (the message names the flag and what to do instead).
    """
    if isinstance(command, (str, bytes)) or not isinstance(command, Sequence) or \
            not all(isinstance(a, str) for a in command):
        raise ValueError(f"{who} takes a torchrun command line as a list of strings, e.g. "
                         f"['torchrun', '--nproc-per-node=4', '--standalone', 'train.py'], got {command!r}")
    if not command:
        raise ValueError(f"{who}: the command is empty; pass e.g. ['torchrun', '--nproc-per-node=4', 'train.py']")
    head = os.path.basename(command[0])
    if head == "torchrun":
        return parse_torchrun_args(command[1:], who=who)
    if (_PYTHON.match(head) or command[0] == sys.executable) and command[1:2] == ["-m"] and \
            command[2:3] and command[2] in _RUN_MODULES:
        return parse_torchrun_args(command[3:], who=who)
    raise ValueError(f"{who}: {list(command[:3])!r}... is no torchrun command; it must start with 'torchrun' or "
                     f"'python -m torch.distributed.run', e.g. ['torchrun', '--nproc-per-node=4', 'train.py']")


def _split(token: str) -> tuple[str, str | None]:
    """``--nproc_per_node=4`` -> ``("nproc-per-node", "4")``; ``-m`` -> ``("module", None)``."""
    if token in _SHORT:
        return _SHORT[token], None
    if token in _SHORT_REFUSED or token[:2] in _SHORT_REFUSED:
        return _SHORT_REFUSED[token[:2]], None
    name, eq, value = token[2:].partition("=")
    return name.replace("_", "-"), (value if eq else None)


def parse_torchrun_args(args: Sequence[str], *, who: str = "tetrarch.job.spmd.serve") -> TorchrunCommand:
    """Parse torchrun's arguments (what follows ``torchrun``): flags, then the program and its arguments.

    Raises:
        ValueError: as :func:`parse_torchrun`.
    """
    values: dict[str, str] = {}
    switches: set[str] = set()
    ignored: list[str] = []
    i = 0
    args = list(args)
    while i < len(args) and args[i].startswith("-") and args[i] != "-":
        token = args[i]
        i += 1
        if token == "--":
            break
        name, value = _split(token)
        if name in _REFUSED:
            raise ValueError(f"torchrun flag --{name} is not supported by {who}: {_REFUSED[name]}")
        if name in _SWITCHES:
            if value is not None:
                raise ValueError(f"torchrun flag --{name} takes no value, got {token!r}")
            switches.add(name)
            continue
        if name not in _VALUE_FLAGS and name not in _IGNORED_VALUE_FLAGS:
            known = ", ".join(f"--{f}" for f in (*_VALUE_FLAGS, *_SWITCHES, *_IGNORED_VALUE_FLAGS))
            raise ValueError(f"torchrun flag {token.partition('=')[0]} is not supported by {who}: the flags "
                             f"understood are {known}, -m")
        if value is None:
            if i >= len(args):
                raise ValueError(f"torchrun flag --{name} needs a value, e.g. --{name}=4")
            value, i = args[i], i + 1
        values[name] = value
        if name in _IGNORED_VALUE_FLAGS:
            ignored.append(f"--{name}")
    if i >= len(args):
        raise ValueError(f"{who}: the command names no program; end it with the script and its arguments, "
                         f"e.g. [..., 'train.py', '--lr', '0.1'] (or -m package.module)")
    if "module" in switches and "no-python" in switches:
        raise ValueError("torchrun flags -m/--module and --no-python exclude each other: -m runs a Python module, "
                         "--no-python an executable")
    nnodes = _nnodes(values.get("nnodes", "1"))
    standalone = "standalone" in switches
    if standalone and nnodes != 1:
        raise ValueError(f"--standalone means one node, but --nnodes={nnodes}: drop --standalone to run on "
                         f"{nnodes} hosts, or drop --nnodes")
    script, rest = args[i], args[i + 1:]
    program = ("-m", script, *rest) if "module" in switches else (script, *rest)
    return TorchrunCommand(nnodes=nnodes, nproc_per_node=_nproc(values.get("nproc-per-node", "1")),
                           program=tuple(program), no_python="no-python" in switches, standalone=standalone,
                           ignored=tuple(ignored))


def _positive(flag: str, text: str, example: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{flag}={text!r} is no integer; pass e.g. {flag}={example}") from None
    if n < 1:
        raise ValueError(f"{flag}={n}: a job needs at least 1 (a zero-size mesh has no ranks)")
    return n


def _nnodes(text: str) -> int:
    low, colon, high = text.partition(":")
    if colon and low.strip() != high.strip():
        raise ValueError(f"elastic --nnodes={text} is not supported: tetrarch reserves a fixed set of hosts; pass "
                         f"--nnodes=N (or N:N)")
    return _positive("--nnodes", low.strip(), "2")


def _nproc(text: str) -> int:
    """An int, or torchrun's ``cpu`` (this machine's CPUs), ``gpu`` (its CUDA GPUs), ``auto`` (GPUs, else CPUs)."""
    if text in ("cpu", "gpu", "auto"):
        gpus = _cuda_devices() if text != "cpu" else 0
        if text == "gpu" and gpus == 0:
            raise ValueError("--nproc-per-node=gpu, but this machine sees no CUDA GPU; pass a number, or 'cpu'")
        return gpus or (os.cpu_count() or 1)
    return _positive("--nproc-per-node", text, "4")


def _cuda_devices() -> int:
    """CUDA GPUs visible here (0 without torch)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_program(command: TorchrunCommand) -> None:
    """Raise before anything starts if the program of ``command`` cannot run from here.

    Relative script paths are from the current directory; ``-m`` modules are looked up on
    ``sys.path``; a ``--no-python`` executable on ``PATH`` (or as a path).

    Raises:
        FileNotFoundError: the script or executable does not exist (or is not executable).
        ModuleNotFoundError: the ``-m`` module cannot be found.
        ValueError: ``-m`` names no module.
    """
    if not command.no_python:
        check_target(list(command.program))
        return
    exe = command.program[0]
    found = exe if os.sep in exe else shutil.which(exe)
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        where = f"in the current directory {os.getcwd()!r}" if os.sep in exe else "on PATH"
        raise FileNotFoundError(f"--no-python: executable {exe!r} not found {where} (or not executable); pass "
                                f"an executable, or drop --no-python to run a Python script")
