"""The ``tetrarch`` command line: ``tetrarch plugins [--json] [--verbose]``.

``--json`` rows carry the keys of :data:`COLUMNS` plus ``traceback`` (broken only).

Listing plugins imports only their featherweight plugin modules and runs their
probes; it never imports pyzmq, pynng, pyverbs or torch's runtime pieces and never
starts a proc runtime.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ._plugins._errors import PluginLoadError
from ._plugins._known import known_for_distribution
from ._plugins._loader import PluginState
from ._plugins._registry import Registry, get_registry
from ._plugins._specs import Status

__all__ = ["main", "plugin_rows"]

COLUMNS = ("distribution", "version", "kind", "backend", "status", "reason", "hint")


def plugin_rows(registry: Registry) -> list[dict[str, str]]:
    """The rows of ``tetrarch plugins``: one per backend, plus one per third-party
    plugin that did not load (its backends are unknown; its kind reads ``plugin``)."""
    tracebacks = {p.distribution: p.traceback for p in registry.plugins() if p.state is PluginState.BROKEN}
    rows = [
        {
            "distribution": s.distribution,
            "version": s.version,
            "kind": s.kind.value,
            "backend": s.name,
            "status": s.status.value,
            "reason": s.reason,
            "hint": s.hint,
            "traceback": tracebacks.get(s.distribution, "") if s.status is Status.BROKEN else "",
        }
        for s in registry.statuses()
    ]
    for p in registry.plugins():
        if p.state is PluginState.LOADED or known_for_distribution(p.distribution):
            continue
        status = Status.BROKEN if p.state is PluginState.BROKEN else Status.UNAVAILABLE
        rows.append(
            {
                "distribution": p.distribution,
                "version": p.version,
                "kind": "plugin",
                "backend": p.name,
                "status": status.value,
                "reason": p.reason,
                "hint": p.hint,
                "traceback": p.traceback,
            }
        )
    return rows


def _table(rows: list[dict[str, str]], verbose: bool) -> str:
    header = ["DISTRIBUTION", "VERSION", "KIND", "BACKEND", "STATUS", "REASON / HINT"]
    body = [
        [r["distribution"], r["version"], r["kind"], r["backend"], r["status"],
         "; ".join(x for x in (r["reason"], r["hint"]) if x)]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header) - 1)]
    lines = []
    for line, row in zip([header, *body], [None, *rows]):
        cells = [cell.ljust(w) for cell, w in zip(line, widths)]
        lines.append("  ".join([*cells, line[-1]]).rstrip())
        if verbose and row is not None and row["traceback"]:
            lines.extend("    " + tb for tb in row["traceback"].rstrip().splitlines())
    return "\n".join(lines)


def _cmd_plugins(args: argparse.Namespace) -> int:
    try:
        registry = get_registry()
    except PluginLoadError as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        if args.verbose and exc.traceback:
            print(exc.traceback, file=sys.stderr)
        return 1
    rows = plugin_rows(registry)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(_table(rows, args.verbose))
    return 0


def _parser() -> argparse.ArgumentParser:
    from tetrarch import __version__

    parser = argparse.ArgumentParser(prog="tetrarch", description="tetrarch actor runtime tools")
    parser.add_argument("--version", action="version", version=f"tetrarch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    plugins = sub.add_parser("plugins", help="list backends, their status and how to fix them")
    plugins.add_argument("--json", action="store_true", help="print a JSON list of rows")
    plugins.add_argument("-v", "--verbose", action="store_true", help="show full tracebacks of broken plugins")
    plugins.set_defaults(func=_cmd_plugins)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a usage error)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args))
