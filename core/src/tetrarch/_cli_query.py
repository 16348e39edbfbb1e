"""``tetrarch query "SELECT ..."``: SQL over a job's telemetry (docs/telemetry.md).

Against a running program, through its admin API (``GET /api/v1/telemetry/query``: the
program serves it with ``TETRARCH_ADMIN=1``; found as ``tetrarch ps`` finds it). Against a
finished job, over the files its hosts' stores left (``--dir``: a run's folder, or the
telemetry folder with ``--job`` naming the run; ``--dir`` alone with several runs in it
reads them all). Prints a table (rich's on a terminal, when installed), or ``--json`` /
``--csv``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_query", "format_result"]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) >= 1e5 else f"{value:.6g}"  # a time keeps its milliseconds
    return str(value)


def format_result(result: dict[str, Any]) -> str:
    """A query's JSON answer (``columns``, ``rows``) as a plain text table."""
    columns = result["columns"]
    cells = [list(columns)] + [[_cell(v) for v in row] for row in result["rows"]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _print_table(result: dict[str, Any]) -> None:
    """A table: rich's on a terminal when it is installed (the admin extra), else plain text."""
    if sys.stdout.isatty():
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            pass
        else:
            table = Table(*result["columns"])
            for row in result["rows"]:
                table.add_row(*(_cell(v) for v in row))
            Console().print(table)
            return
    print(format_result(result))


def _from_folder(sql: str, folder: Path) -> dict[str, Any]:
    from ._telemetry._query import as_json, run_sql
    from ._telemetry._store import read_folder

    return as_json(run_sql(sql, [read_folder(folder)]))


def _folder(args: argparse.Namespace) -> Path:
    """The folder ``--dir``/``--job`` name.

    Raises:
        FileNotFoundError: it does not exist (the message lists the runs there).
    """
    from ._config import TELEMETRY_DIR
    from ._runtime.services._telemetry import default_base

    base = Path(args.dir) if args.dir else Path(TELEMETRY_DIR() or default_base())
    folder = base / args.job if args.job else base
    if not folder.is_dir():
        runs = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
        listed = f"; runs there: {', '.join(runs[-10:])}" if runs else ""
        raise FileNotFoundError(f"no telemetry folder at {folder}{listed}")
    return folder


def _cmd_query(args: argparse.Namespace) -> int:
    from ._cli_admin import CliError, fetch, pick_server
    from ._errors import TelemetryQueryError

    try:
        if args.dir or args.job:
            result = _from_folder(args.sql, _folder(args))
        else:
            result = fetch(pick_server(args.pid), "/api/v1/telemetry/query", {"sql": args.sql})
    except (CliError, TelemetryQueryError, FileNotFoundError) as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(result["columns"])
        writer.writerows(result["rows"])
    else:
        _print_table(result)
    for host in result.get("missing", []):
        print(f"tetrarch: no rows from the host agent {host}", file=sys.stderr)
    return 0


def add_query(sub: Any) -> None:
    """Add ``query`` to the ``tetrarch`` command line's subcommands."""
    q = sub.add_parser("query", help="SQL over a job's telemetry: a running program's hosts (its admin API), or "
                                     "a finished job's files (--dir/--job); tables in docs/telemetry.md")
    q.add_argument("sql", help='one SQL statement, e.g. "SELECT event, count(*) FROM events GROUP BY 1"')
    q.add_argument("--pid", type=int, help="the running client program's pid, when several run")
    q.add_argument("--dir", help="a finished job's telemetry folder (default: TETRARCH_TELEMETRY_DIR's)")
    q.add_argument("--job", help="the run's folder name inside --dir (as listed there)")
    out = q.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print {columns, rows, missing} as JSON")
    out.add_argument("--csv", action="store_true", help="print CSV with a header row")
    q.set_defaults(func=_cmd_query)
