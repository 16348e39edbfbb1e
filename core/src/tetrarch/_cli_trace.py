"""``tetrarch trace [-o FILE] [--sample R] -- python prog.py ...``: run a program and write its trace file.

The program runs with ``TETRARCH_TRACE_FILE`` set (and ``TETRARCH_TRACE_SAMPLE`` with
``--sample``); when it exits, its client has written every process's spans to the file
(:mod:`tetrarch._telemetry._perfetto`). The command says where the file is and how to open it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from typing import Any

__all__ = ["add_trace"]

#: Where the trace goes without ``-o``.
DEFAULT_FILE = "tetrarch.pftrace"


def add_trace(sub: Any) -> None:
    """Add ``trace`` to the ``tetrarch`` command line's subcommands."""
    trace = sub.add_parser("trace", help="run a program and write a Perfetto trace of its calls and spawns, "
                                         "e.g. `tetrarch trace -- python prog.py`")
    trace.add_argument("-o", "--output", default=DEFAULT_FILE,
                       help=f"the trace file to write (default {DEFAULT_FILE}); open it at https://ui.perfetto.dev")
    trace.add_argument("--sample", type=float, default=None,
                       help="the fraction of calls traced, 0 < R <= 1 (default 1: every call)")
    trace.add_argument("command", nargs=argparse.REMAINDER, help="the program to run, after `--`")
    trace.set_defaults(func=_cmd_trace)


def _cmd_trace(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("tetrarch trace: no program to run; e.g. `tetrarch trace -o run.pftrace -- python prog.py`",
              file=sys.stderr)
        return 2
    if args.sample is not None and not 0.0 < args.sample <= 1.0:
        print(f"tetrarch trace: --sample must be a fraction above 0 and at most 1, got {args.sample:g}",
              file=sys.stderr)
        return 2
    out = os.path.abspath(args.output)
    try:
        if os.path.exists(out):
            os.remove(out)  # a file left by an earlier run must not pass for this one's
    except OSError as exc:
        print(f"tetrarch trace: cannot replace {out}: {exc}", file=sys.stderr)
        return 2
    env = {**os.environ, "TETRARCH_TRACE_FILE": out}
    if args.sample is not None:
        env["TETRARCH_TRACE_SAMPLE"] = repr(args.sample)
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        print(f"tetrarch trace: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the program; we wait for its end
    try:
        status = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    if os.path.exists(out):
        print(f"tetrarch trace: wrote {out} ({os.path.getsize(out)} bytes); open it at https://ui.perfetto.dev "
              f"(Open trace file), or query it with perfetto's trace_processor", file=sys.stderr)
    else:
        print(f"tetrarch trace: no trace was written to {out}: the program made no traced call or spawn, or its "
              f"client did not exit normally (see the warnings above)", file=sys.stderr)
    return status if status >= 0 else 128 - status
