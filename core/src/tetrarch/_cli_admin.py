"""``tetrarch ps``: the actors of a running program, through its admin API (:mod:`tetrarch._admin`).

The program is found by its announcement file (``tetrarch.admin.find_servers``): the only
one running, or the one ``--pid`` names.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ._admin._token import ServerInfo, admin_dir, find_servers

__all__ = ["PS_COLUMNS", "add_commands", "fetch", "pick_server"]

#: The columns of ``tetrarch ps`` (keys of the API's Actor records), in order.
PS_COLUMNS = ("mesh", "rank", "point", "class", "state", "mailbox", "endpoint", "pid", "host")
#: Seconds a request to the admin server may take.
REQUEST_TIMEOUT_S = 15.0


class CliError(Exception):
    """A message for the user; the command exits with status 1."""


def pick_server(pid: int | None) -> ServerInfo:
    """The running program to talk to.

    Raises:
        CliError: none serves the admin API, ``pid`` names none of them, or several run and no ``pid`` says which.
    """
    servers = find_servers()
    if pid is not None:
        for s in servers:
            if s.pid == pid:
                return s
        raise CliError(f"no running tetrarch program with pid {pid} serves the admin API"
                       + (f" (running: {', '.join(f'{s.pid} {s.script}' for s in servers)})" if servers else ""))
    if not servers:
        raise CliError(f"no running tetrarch program serves the admin API (looked in {admin_dir()}): start it with "
                       f"tetrarch.configure(admin=True), TETRARCH_ADMIN=1 or tetrarch.admin.serve()")
    if len(servers) > 1:
        listed = "\n".join(f"  --pid {s.pid}  {s.script}  {s.url}" for s in servers)
        raise CliError(f"{len(servers)} running tetrarch programs serve the admin API; say which:\n{listed}")
    return servers[0]


def fetch(server: ServerInfo, path: str, query: dict[str, str] | None = None) -> Any:
    """GET ``path`` of the admin API, decoded from JSON.

    Raises:
        CliError: the server refused, failed or did not answer.
    """
    url = server.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {server.token}"})
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        raise CliError(f"the admin server of pid {server.pid} answered {exc.code} {exc.reason} for {path}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CliError(f"cannot reach the admin server of pid {server.pid} at {server.url}: {exc}") from exc


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def format_table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    cells = [[c.upper() for c in columns]] + [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _cmd_ps(args: argparse.Namespace) -> int:
    try:
        server = pick_server(args.pid)
        query = {k: v for k, v in (("mesh", args.mesh), ("state", args.state)) if v}
        rows = fetch(server, "/api/v1/actors", query)
        silent = [p for p in fetch(server, "/api/v1/procs") if p["state"] == "not answering"]
    except CliError as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(format_table(rows, PS_COLUMNS))
    for p in silent:
        print(f"tetrarch: {p['name']} (pid {p['pid']} on {p['host']}) did not answer in time (stopped, or a C call "
              f"holds its GIL): its actors are not listed", file=sys.stderr)
    return 0


def add_commands(sub: Any) -> None:
    """Add ``ps`` to the ``tetrarch`` command line's subcommands."""
    ps = sub.add_parser("ps", help="list the actors of a running program (its admin API): mesh, rank, state, "
                                   "queue, running endpoint")
    ps.add_argument("--json", action="store_true", help="print the API's JSON records")
    ps.add_argument("--mesh", help="only the actors of the actor mesh of this name")
    ps.add_argument("--state", choices=["idle", "busy", "stopped", "failed"], help="only those in this state")
    ps.add_argument("--pid", type=int, help="the client program's pid, when several run")
    ps.set_defaults(func=_cmd_ps)
