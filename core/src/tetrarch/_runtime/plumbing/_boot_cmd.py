"""How a host agent starts a proc: Monarch's ``BootstrapCommand`` for ``spawn_procs(bootstrap_command=...)``.

By default a host agent starts each proc as ``<its own Python> -m tetrarch._runtime.programs._proc_main``.
A :class:`BootstrapCommand` replaces that command line: another Python (a different
virtual environment on the hosts), or a wrapper that ends by running tetrarch's proc
main (``numactl``, ``taskset``, ``env``, a shell script that ``exec``\\ s it). The
wrapper must keep the proc's inherited file descriptors open (the allocation's secret
arrives through one) and must not detach from the host agent (it watches the process).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..._errors import ArgumentError, ArgumentTypeError
from ..values import _wire
from ..values._shape import Point
from ._spawn import PROC_MAIN_MODULE

__all__ = ["PROC_MAIN", "BootstrapCommand", "default_bootstrap_cmd", "proc_command"]

#: The arguments that make a Python run tetrarch's proc main.
PROC_MAIN: tuple[str, ...] = ("-m", PROC_MAIN_MODULE)


@dataclass(frozen=True)
class BootstrapCommand:
    """The command a host agent runs to start a proc: ``[program, *args]`` with ``env`` added.

    ``program`` is a path or a name looked up in the host agent's ``PATH``. ``arg0`` is
    Monarch's way to set ``argv[0]`` apart from the program; tetrarch starts the program
    under its own name, so only ``None`` (or ``program`` itself) is accepted.

    Raises:
        ArgumentTypeError: ``program`` is not a non-empty string, ``args`` not strings,
            ``env`` not a mapping of strings to strings.
        ArgumentError: ``arg0`` differs from ``program``.
    """

    program: str
    arg0: str | None = None
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.program, str) or not self.program:
            raise ArgumentTypeError(f"BootstrapCommand needs a program (a path or a name on PATH), got "
                                    f"{self.program!r}")
        if self.arg0 is not None and self.arg0 != self.program:
            raise ArgumentError(f"BootstrapCommand(arg0={self.arg0!r}) is not supported: tetrarch starts the program "
                                f"under its own name; leave arg0 unset (or wrap the program in a script)")
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise ArgumentTypeError(f"BootstrapCommand(args=...) must be a sequence of strings, got {self.args!r}")
        if not isinstance(self.env, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            raise ArgumentTypeError(f"BootstrapCommand(env=...) must map strings to strings, got {self.env!r}")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", dict(self.env))

    @property
    def argv(self) -> tuple[str, ...]:
        """``(program, *args)``: the full command line."""
        return (self.program, *self.args)

    def with_env(self, env: Mapping[str, str]) -> BootstrapCommand:
        """This command with ``env`` added to its environment (a new command; this one is unchanged).

        Raises:
            ArgumentTypeError: ``env`` is not a mapping of strings to strings.
        """
        return replace(self, env={**self.env, **env})

    def _wire(self) -> _wire.ProcCommand:
        return _wire.ProcCommand(self.program, tuple(self.args), dict(self.env))


def default_bootstrap_cmd() -> BootstrapCommand:
    """The command a host agent would use by default, with this process's Python.

    ``default_bootstrap_cmd().with_env({"NCCL_DEBUG": "INFO"})`` adds variables; a
    wrapper puts its own program first:
    ``BootstrapCommand("numactl", args=["--cpunodebind=0", *default_bootstrap_cmd().argv])``.
    """
    return BootstrapCommand(sys.executable, args=PROC_MAIN)


BootstrapSpec = BootstrapCommand | Callable[[Point], BootstrapCommand] | None


def proc_command(spec: BootstrapSpec, point: Point) -> _wire.ProcCommand | None:
    """The wire form of ``spec`` for the proc at ``point`` (a callable is asked per proc).

    Raises:
        ArgumentTypeError: ``spec`` (or what the callable returned) is no ``BootstrapCommand``.
    """
    if spec is None:
        return None
    command = spec(point) if callable(spec) and not isinstance(spec, BootstrapCommand) else spec
    if not isinstance(command, BootstrapCommand):
        raise ArgumentTypeError(f"spawn_procs(bootstrap_command=...) takes a BootstrapCommand or a function of the "
                                f"proc's Point returning one, got {command!r}; e.g. "
                                f"default_bootstrap_cmd().with_env({{'X': '1'}})")
    return command._wire()
