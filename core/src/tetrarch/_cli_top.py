"""``tetrarch top``: a refreshing terminal view of a running program's busiest procs and actors.

Each frame asks the admin API for procs and actors (:mod:`._cli_admin`); a proc's CPU share is
its CPU seconds' growth between two frames. Drawn with Rich's ``Live`` display; ``--once``
prints one frame (two samples ``--interval`` apart) and exits, for scripts and tests.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Any

from ._cli_admin import CliError, fetch, pick_server

__all__ = ["add_top", "frame"]


def _sample(server: Any) -> tuple[float, list[dict[str, Any]], list[dict[str, Any]]]:
    return time.monotonic(), fetch(server, "/api/v1/procs"), fetch(server, "/api/v1/actors")


def frame(before: tuple[float, list[dict[str, Any]], list[dict[str, Any]]],
          after: tuple[float, list[dict[str, Any]], list[dict[str, Any]]], limit: int) -> Any:
    """The Rich renderable of one frame: procs by CPU share, actors busiest first, endpoints running now."""
    from rich.console import Group
    from rich.table import Table

    t0, procs0, _ = before
    t1, procs1, actors = after
    cpu0 = {p["ident"]: p["cpu_s"] for p in procs0 if p["cpu_s"] is not None}
    span = max(t1 - t0, 1e-6)
    share: dict[str, float] = {}
    for p in procs1:
        if p["cpu_s"] is not None and p["ident"] in cpu0:
            share[p["ident"]] = 100.0 * (p["cpu_s"] - cpu0[p["ident"]]) / span
    procs = sorted(procs1, key=lambda p: -share.get(p["ident"], -1.0))[:limit]
    pt = Table(title=f"procs ({len(procs1)}; {sum(p['state'] == 'not answering' for p in procs1)} not answering)")
    for col in ("proc", "pid", "host", "state", "CPU %", "RSS MiB", "threads", "actors"):
        pt.add_column(col, justify="right" if col in ("pid", "CPU %", "RSS MiB", "threads", "actors") else "left")
    for p in procs:
        cpu = share.get(p["ident"])
        pt.add_row(p["name"], str(p["pid"]), p["host"], p["state"], "-" if cpu is None else f"{cpu:.0f}",
                   "-" if p["rss_bytes"] is None else f"{p['rss_bytes'] / 1048576:.0f}",
                   str(p["threads"] or "-"), str(p["actors"] or "-"))
    rank = {"busy": 0, "failed": 1, "idle": 2, "stopped": 3}
    busiest = sorted(actors, key=lambda a: (-a["mailbox"], rank.get(a["state"], 4), -share.get(a["proc"], 0.0)))
    at = Table(title=f"actors ({len(actors)}; {sum(a['state'] == 'busy' for a in actors)} busy)")
    for col in ("actor", "class", "state", "mailbox", "endpoint", "proc CPU %"):
        at.add_column(col, justify="right" if col in ("mailbox", "proc CPU %") else "left")
    for a in busiest[:limit]:
        cpu = share.get(a["proc"])
        at.add_row(f"{a['mesh']}{a['point']}", a["class"], a["state"], str(a["mailbox"]), a["endpoint"] or "-",
                   "-" if cpu is None else f"{cpu:.0f}")
    running = Counter(a["endpoint"] for a in actors if a["endpoint"])
    et = Table(title="endpoints running now")
    et.add_column("endpoint")
    et.add_column("actors in it", justify="right")
    for name, n in running.most_common(limit):
        et.add_row(name, str(n))
    return Group(pt, at, et)


def _cmd_top(args: argparse.Namespace) -> int:
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        print('tetrarch: top draws with Rich: pip install "tetrarch[admin]" (or pip install rich)', file=sys.stderr)
        return 1
    console = Console()
    try:
        server = pick_server(args.pid)
        before = _sample(server)
        if args.once:
            time.sleep(args.interval)  # the CPU share is a rate over this interval
            console.print(frame(before, _sample(server), args.limit))
            return 0
        with Live(console=console, auto_refresh=False, screen=False) as live:
            while True:
                time.sleep(args.interval)
                after = _sample(server)
                live.update(frame(before, after, args.limit), refresh=True)
                before = after
    except CliError as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


def add_top(sub: Any) -> None:
    """Add ``top`` to the ``tetrarch`` command line's subcommands."""
    top = sub.add_parser("top", help="a refreshing view of a running program's busiest procs and actors (Ctrl-C "
                                     "ends it)")
    top.add_argument("--interval", type=float, default=2.0, help="seconds between frames (default 2)")
    top.add_argument("--limit", type=int, default=20, help="rows per table (default 20)")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.add_argument("--pid", type=int, help="the client program's pid, when several run")
    top.set_defaults(func=_cmd_top)
