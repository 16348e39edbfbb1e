"""``tetrarch top``: a refreshing terminal view of a running program's busiest procs, actors and endpoints.

Each frame asks the admin API for procs and actors (:mod:`._cli_admin`); rates are growths
between two frames: a proc's CPU share, an actor's calls per second and share of time in its
handlers, an endpoint's calls per second and mean time per call. Drawn with Rich's ``Live`` display; ``--once``
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
    _, _, actors0 = before
    ident = lambda a: (a["key"], a["rank"])  # noqa: E731 - a key function
    def busy(a: dict[str, Any]) -> float:  # seconds in handlers, the one running now included
        return a.get("busy_s", 0.0) + (a.get("running_for_s") or 0.0)

    handled0 = {ident(a): (a.get("handled", 0), busy(a), a.get("endpoints", {})) for a in actors0}
    rate = {ident(a): (a.get("handled", 0) - handled0.get(ident(a), (0, 0.0, {}))[0]) / span for a in actors}
    load = {ident(a): (busy(a) - handled0.get(ident(a), (0, busy(a), {}))[1]) / span for a in actors}
    order = {"busy": 0, "failed": 1, "idle": 2, "stopped": 3}
    busiest = sorted(actors, key=lambda a: (-load[ident(a)], -a["mailbox"], order.get(a["state"], 4)))
    at = Table(title=f"actors ({len(actors)}; {sum(a['state'] == 'busy' for a in actors)} busy)")
    for col in ("actor", "class", "state", "mailbox", "endpoint", "for s", "calls/s", "busy %"):
        at.add_column(col, justify="right" if col in ("mailbox", "for s", "calls/s", "busy %") else "left")
    for a in busiest[:limit]:
        running = a.get("running_for_s")
        at.add_row(f"{a['mesh']}{a['point']}", a["class"], a["state"], str(a["mailbox"]), a["endpoint"] or "-",
                   "-" if running is None else f"{running:.1f}", f"{rate[ident(a)]:.0f}",
                   f"{100 * load[ident(a)]:.0f}")
    # Per endpoint over the interval: calls that ended, and their mean time (all actors together).
    calls: Counter[str] = Counter()
    seconds: Counter[str] = Counter()
    for a in actors:
        old = handled0.get(ident(a), (0, 0.0, {}))[2]
        for name, row in a.get("endpoints", {}).items():
            was = old.get(name, {"calls": 0, "total_s": 0.0})
            calls[name] += row["calls"] - was["calls"]
            seconds[name] += row["total_s"] - was["total_s"]
    running_now = Counter(a["endpoint"] for a in actors if a["endpoint"])
    et = Table(title="endpoints")
    for col in ("endpoint", "calls/s", "mean ms", "running now"):
        et.add_column(col, justify="left" if col == "endpoint" else "right")
    names = sorted(set(calls) | set(running_now), key=lambda n: (-seconds[n], -running_now[n], n))
    for name in names[:limit]:
        mean = f"{1e3 * seconds[name] / calls[name]:.2f}" if calls[name] else "-"
        et.add_row(name, f"{calls[name] / span:.0f}", mean, str(running_now[name]))
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
