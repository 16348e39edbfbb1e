"""The ``tetrarch`` command line: ``tetrarch plugins [--json] [--verbose]``, ``tetrarch config [--json]``,
``tetrarch plugins --explain KIND [ADDRESS] [--require CAP] [--json]`` (how a backend is selected),
``tetrarch doctor rdma`` (RDMA backends, probes, devices and the selection here: ``_doctor``),
``tetrarch doctor mesh`` (probe a running program's host agents, procs and actors: ``_cli_admin``),
``tetrarch run [torchrun flags] train.py ...`` (torchrun's job on a mesh: ``_spmd._cli_run``),
``tetrarch ps [--json] [--mesh M] [--state S] [--pid PID]``, ``stack``, ``debug`` (a running program:
``_cli_admin``), ``tetrarch top`` (its busiest procs and actors, refreshing: ``_cli_top``).

``plugins --json`` rows carry the keys of :data:`COLUMNS` plus ``traceback`` (broken
only); ``config --json`` rows the keys of :data:`CONFIG_KEYS`.

Listing plugins imports only their featherweight plugin modules and runs their
probes; it never imports pyzmq, pynng, pyverbs or torch's runtime pieces and never
starts a proc runtime.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from ._config import SETTINGS, TEST_SETTINGS, Setting, display
from ._config_plugins import settings_by_owner
from ._plugins._api import undeclared_note
from ._plugins._errors import PluginLoadError
from ._plugins._known import known_for_distribution
from ._plugins._loader import STATUS_OF_STATE, PluginState
from ._plugins._registry import Registry, get_registry
from ._plugins._request import SelectionRequest
from ._plugins._specs import BackendKind, Status

__all__ = ["COLUMNS", "CONFIG_KEYS", "config_rows", "main", "plugin_rows"]

COLUMNS = ("distribution", "version", "kind", "backend", "status", "reason", "hint")
#: The keys of a ``tetrarch config --json`` row. ``value``, ``default``: JSON values (a list
#: for a list of names, null for "chosen automatically"); ``error``: why the environment
#: variable's text is no valid value (then ``value`` is that text), else empty; ``owner``: who declares
#: the setting: ``tetrarch`` (core), a plugin's distribution, or :data:`TEST_OWNER`.
CONFIG_KEYS = ("key", "env", "value", "source", "doc", "type", "default", "propagate", "error", "owner")
CORE_OWNER, TEST_OWNER = "tetrarch", "tetrarch-test-suite"


def plugin_rows(registry: Registry) -> list[dict[str, str]]:
    """The rows of ``tetrarch plugins``: one per backend, plus one per third-party
    plugin that did not load (its backends are unknown; its kind reads ``plugin``).

    A row's ``hint`` is the backend's remedy (``BackendStatus.remedy``; the JSON key keeps its
    name); for a backend whose plugin declares no plugin API version it ends with a note
    saying so (its author should declare one; see ``tetrarch.plugins.PLUGIN_API_VERSION``).
    """
    tracebacks = {p.distribution: p.traceback for p in registry.plugins() if p.state is PluginState.BROKEN}
    notes = {p.distribution: undeclared_note(p.target) for p in registry.plugins()
             if p.state is PluginState.LOADED and not p.api and p.distribution != "tetrarch"}
    rows = [
        {
            "distribution": s.distribution,
            "version": s.version,
            "kind": s.kind.value,
            "backend": s.name,
            "status": s.shown,
            "reason": s.reason,
            "hint": "; ".join(x for x in (s.remedy, notes.get(s.distribution, "")) if x),
            "traceback": tracebacks.get(s.distribution, "") if s.status is Status.BROKEN else "",
        }
        for s in registry.statuses()
    ]
    for p in registry.plugins():
        if p.state is PluginState.LOADED or known_for_distribution(p.distribution):
            continue
        status = STATUS_OF_STATE[p.state]
        rows.append(
            {
                "distribution": p.distribution,
                "version": p.version,
                "kind": "plugin",
                "backend": p.name,
                "status": status.value,
                "reason": p.reason,
                "hint": p.remedy,
                "traceback": p.traceback,
            }
        )
    return rows


def _align(header: Sequence[str], body: Sequence[Sequence[str]], after: Sequence[Sequence[str]] = ()) -> str:
    """Columns padded to their widest cell (the last one runs free); ``after[i]``: lines under body row i."""
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header) - 1)]
    lines = []
    for n, line in enumerate([header, *body]):
        cells = [cell.ljust(w) for cell, w in zip(line, widths, strict=False)]
        lines.append("  ".join([*cells, line[-1]]).rstrip())
        if 0 < n <= len(after):
            lines.extend(after[n - 1])
    return "\n".join(lines)


def _table(rows: list[dict[str, str]], verbose: bool) -> str:
    header = ["DISTRIBUTION", "VERSION", "KIND", "BACKEND", "STATUS", "REASON / HINT"]
    body = [
        [r["distribution"], r["version"], r["kind"], r["backend"], r["status"],
         "; ".join(x for x in (r["reason"], r["hint"]) if x)]
        for r in rows
    ]
    after = [["    " + tb for tb in r["traceback"].rstrip().splitlines()] if verbose else [] for r in rows]
    return _align(header, body, after)


def _cmd_plugins(args: argparse.Namespace) -> int:
    try:
        registry = get_registry()
    except PluginLoadError as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        if args.verbose and exc.traceback:
            print(exc.traceback, file=sys.stderr)
        return 1
    except ValueError as exc:  # a plugin setting's environment variable holds no valid value
        print(f"tetrarch: {exc}", file=sys.stderr)
        return 1
    if args.explain is not None:
        return _explain(registry, args)
    if args.address is not None:
        print("tetrarch: an ADDRESS goes with --explain transport", file=sys.stderr)
        return 2
    rows = plugin_rows(registry)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(_table(rows, args.verbose))
    return 0


def _explain(registry: Registry, args: argparse.Namespace) -> int:
    """``plugins --explain KIND [ADDRESS]``: the decision walk; status 1 when nothing can be selected."""
    request = SelectionRequest(BackendKind(args.explain), require=frozenset(args.require))
    try:
        explanation = registry.explain(BackendKind(args.explain), address=args.address, request=request)
    except ValueError as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(explanation.as_dict(), indent=2) if args.json else explanation.render())
    return 0 if explanation.winner is not None else 1


def _json_value(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def _settings_now() -> list[tuple[Setting[Any], object, str, str, str]]:
    """``(setting, value, source, error, owner)`` per setting: core's, each plugin's, the test suite's;
    an invalid variable gives its text and the error."""
    groups = [(CORE_OWNER, list(SETTINGS.values())), *sorted(settings_by_owner().items()),
              (TEST_OWNER, list(TEST_SETTINGS.values()))]
    entries: list[tuple[Setting[Any], object, str, str, str]] = []
    for owner, settings in groups:
        for s in settings:
            try:
                value, where = s.lookup()
                entries.append((s, value, where, "", owner))
            except ValueError as exc:
                entries.append((s, os.environ.get(s.env, ""), "environment", str(exc), owner))
    return entries


def _config_table(entries: list[tuple[Setting[Any], object, str, str, str]]) -> str:
    """Core's settings under the header, then each plugin's and the test suite's under a heading line."""
    body = [[s.key, s.env, f"{value} (invalid)" if error else display(s, value), where, s.doc]
            for s, value, where, error, _ in entries]
    lines = _align(["KEY", "VARIABLE", "VALUE", "SOURCE", "MEANING"], body).splitlines()
    out, owner_now = lines[:1], CORE_OWNER
    for (*_, owner), line in zip(entries, lines[1:], strict=True):
        if owner != owner_now:
            owner_now = owner
            out += ["", "tetrarch's own test suite (not for production):" if owner == TEST_OWNER
                    else f"plugin {owner}:"]
        out.append(line)
    return "\n".join(out)


def config_rows() -> list[dict[str, Any]]:
    """The rows of ``tetrarch config --json``: one per setting, its current value and where it came from.

    Never raises: an environment variable whose text is no valid value gives a row
    whose ``error`` says so.
    """
    return [
        {"key": s.key, "env": s.env, "value": _json_value(value), "source": where, "doc": s.doc,
         "type": s.expected, "default": _json_value(s.default), "propagate": s.propagate, "error": error,
         "owner": owner}
        for s, value, where, error, owner in _settings_now()
    ]


def _cmd_config(args: argparse.Namespace) -> int:
    entries = _settings_now()
    if args.json:
        print(json.dumps(config_rows(), indent=2))
    else:
        print(_config_table(entries))
    errors = [error for _, _, _, error, _ in entries if error]
    for error in errors:
        print(f"tetrarch: {error}", file=sys.stderr)
    return 1 if errors else 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    if args.topic == "mesh":
        from ._cli_admin import doctor_mesh

        return doctor_mesh(args)
    from ._doctor import rdma_report

    try:
        print(rdma_report(get_registry()))
    except (PluginLoadError, ValueError) as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    from tetrarch import __version__

    parser = argparse.ArgumentParser(prog="tetrarch", description="tetrarch actor runtime tools")
    parser.add_argument("--version", action="version", version=f"tetrarch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    plugins = sub.add_parser("plugins", help="list backends, their status and how to fix them")
    plugins.add_argument("--json", action="store_true", help="print a JSON list of rows")
    plugins.add_argument("-v", "--verbose", action="store_true", help="show full tracebacks of broken plugins")
    plugins.add_argument("--explain", metavar="KIND", choices=[k.value for k in BackendKind],
                         help="show how the backend of KIND (transport, rdma, allocator) is selected here, rule by "
                              "rule, and which one wins")
    plugins.add_argument("--require", metavar="CAPABILITY", action="append", default=[],
                         help="with --explain: a capability the backend must have (repeatable), e.g. same-host")
    plugins.add_argument("address", nargs="?", metavar="ADDRESS",
                         help="with --explain transport: the address to select a transport for (tcp://h:p, "
                              "zmq+tcp://h:p, ...)")
    plugins.set_defaults(func=_cmd_plugins)
    config = sub.add_parser("config", help="list settings, their current values and where each came from")
    config.add_argument("--json", action="store_true", help="print a JSON list of rows")
    config.set_defaults(func=_cmd_config)
    doctor = sub.add_parser("doctor", help="diagnose: `doctor rdma` (this machine), `doctor mesh` (a running program)")
    doctor.add_argument("topic", choices=["rdma", "mesh"],
                        help="rdma: backends, probes, devices and the selection here; mesh: probe every host agent, "
                             "proc and actor of a running program (its admin API): pass, slow or fail, exit 1 on a "
                             "failure")
    doctor.add_argument("--json", action="store_true", help="mesh: print the API's JSON records")
    doctor.add_argument("--pid", type=int, help="mesh: the client program's pid, when several run")
    doctor.add_argument("--slow-ms", type=float, default=100.0, help="mesh: answers slower than this are slow")
    doctor.set_defaults(func=_cmd_doctor)
    from ._cli_admin import add_commands
    from ._cli_query import add_query
    from ._cli_top import add_top
    from ._cli_trace import add_trace

    add_commands(sub)
    add_top(sub)
    add_trace(sub)
    add_query(sub)
    # `run` takes torchrun's flags verbatim, so main() hands its arguments over before argparse sees them.
    sub.add_parser("run", add_help=False, help="run a torchrun command line on a tetrarch mesh: "
                   "`tetrarch run --nproc-per-node=4 train.py ...` (see `tetrarch run --help`)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a usage error)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["run"]:
        from ._spmd._cli_run import main as run_main

        args = argparse.Namespace(func=lambda _: run_main(args_list[1:]))
    else:
        parser = _parser()
        args = parser.parse_args(argv)
        if getattr(args, "func", None) is None:
            parser.print_help(sys.stderr)
            return 2
    try:
        status = int(args.func(args))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``tetrarch plugins --json | head -1``): no traceback, and
        # no second one when Python flushes stdout at exit (the recipe of Python's signal docs).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
    return status
