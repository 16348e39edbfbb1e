"""What ``SPMDActor.main`` runs, checked before any rank starts it, and how its end is reported.

A target is a script (``["train.py", "--lr", "0.1"]``), a module (``["-m", "pkg.train", ...]``),
both run as ``__main__`` with their own ``sys.argv`` as torchrun runs them, or a callable.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Union

from .._errors import TetrarchError

__all__ = ["RankExitError", "RunAbortedError", "Target", "check_target", "run_target"]

#: What ``main`` accepts: script arguments or a callable taking no arguments.
Target = Union[Sequence[str], Callable[[], Any]]  # noqa: UP007 - a runtime alias


class RankExitError(TetrarchError, RuntimeError):
    """The program of one rank ended with ``sys.exit(status)`` for a status other than 0."""

    def __init__(self, rank: int, status: int, detail: str = "") -> None:
        self.rank = rank
        self.status = status
        self.detail = detail
        super().__init__(f"rank {rank} exited with status {status}{': ' + detail if detail else ''}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rank, self.status, self.detail))


class RunAbortedError(TetrarchError, RuntimeError):
    """This rank's program was stopped because another rank of the run failed first.

    ``failed_rank`` is that rank and ``cause`` its error (its traceback, or why its process
    is gone). The error this rank itself saw (typically a collective that lost its peer) is
    the ``__cause__``.
    """

    def __init__(self, rank: int, failed_rank: int, cause: str) -> None:
        self.rank = rank
        self.failed_rank = failed_rank
        self.cause = cause
        super().__init__(f"rank {rank} stopped: rank {failed_rank} failed first; its error:\n{cause}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rank, self.failed_rank, self.cause))


def check_target(target: Target) -> None:
    """Raise before anything runs if ``target`` cannot be started here.

    Raises:
        ValueError: ``target`` is empty, ``-m`` has no module, or it is neither arguments nor a callable.
        FileNotFoundError: the script does not exist (relative paths are from the current directory).
        ModuleNotFoundError: the ``-m`` module cannot be found on ``sys.path``.
    """
    if callable(target):
        return
    if isinstance(target, (str, bytes)) or not isinstance(target, Sequence):
        raise ValueError(f"script_args must be a list such as ['train.py', '--lr', '0.1'] or ['-m', 'pkg.train'],"
                         f" or a callable; got {target!r}")
    args = [str(a) for a in target]
    if not args:
        raise ValueError("No script or module specified: script_args is empty; pass ['path/to/train.py', *args]"
                         " or ['-m', 'package.module', *args]")
    if args[0] == "-m":
        if len(args) < 2 or not args[1]:
            raise ValueError("script_args ['-m'] names no module: pass ['-m', 'package.module', *args]")
        try:
            spec = importlib.util.find_spec(args[1])
        except (ImportError, ValueError) as exc:  # a parent package that does not import
            raise ModuleNotFoundError(f"module {args[1]!r} cannot be imported ({exc}); check sys.path"
                                      " (the client's sys.path reaches the procs) and the module name") from exc
        if spec is None:
            raise ModuleNotFoundError(f"no module named {args[1]!r} on sys.path of {os.uname().nodename};"
                                      " install it or add its folder to sys.path / PYTHONPATH", name=args[1])
        return
    if not os.path.isfile(args[0]):
        raise FileNotFoundError(f"script {args[0]!r} does not exist (current directory {os.getcwd()!r});"
                                " pass an absolute path or start the client where the relative path resolves")


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def run_target(target: Target, rank: int, keep: list[Any]) -> Any:
    """Run ``target`` to its end in this process; ``True`` for a script/module, else what the callable returned.

    ``sys.exit(0)`` (or ``sys.exit()``) is a normal end. A script's or module's globals are
    appended to ``keep`` rather than freed here: freeing a DDP model right after its last
    collective can deadlock in torch (the reducer's gloo process group joins its worker
    threads holding the GIL while one still needs it to finish that collective's work item).

    Raises:
        RankExitError: ``sys.exit(status)`` with another status.
        Exception: whatever the program raised.
    """
    try:
        if callable(target):
            return target()
        args = [str(a) for a in target]
        if args[0] == "-m":
            with _argv([args[1], *args[2:]]):
                keep.append(runpy.run_module(args[1], run_name="__main__", alter_sys=True))
        else:
            with _argv(args):
                keep.append(runpy.run_path(args[0], run_name="__main__"))
        return True
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            return True
        if isinstance(code, int):
            raise RankExitError(rank, code) from None
        raise RankExitError(rank, 1, str(code)) from None
