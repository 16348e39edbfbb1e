"""``tetrarch ps``, ``stack``, ``debug`` and ``doctor mesh``: a running program seen through its admin API
(:mod:`tetrarch._admin`).

The program is found by its announcement file (``tetrarch.admin.find_servers``): the only
one running, or the one ``--pid`` names.
"""

from __future__ import annotations

import argparse
import json
import re
import select
import socket
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ._admin._token import ServerInfo, admin_dir, find_servers

__all__ = ["DOCTOR_COLUMNS", "PS_COLUMNS", "add_commands", "doctor_mesh", "fetch", "format_stack", "pick_server"]

#: The columns of ``tetrarch ps`` (keys of the API's Actor records), in order.
PS_COLUMNS = ("mesh", "rank", "point", "class", "state", "mailbox", "endpoint", "for_s", "handled", "pid", "host")
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
        try:
            why = json.loads(exc.read() or b"{}").get("error") or exc.reason
        except ValueError:
            why = exc.reason
        raise CliError(f"the admin server of pid {server.pid} answered {exc.code} for {path}: {why}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CliError(f"cannot reach the admin server of pid {server.pid} at {server.url}: {exc}") from exc


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def format_table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    cells = [[c.upper() for c in columns]] + [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _print_rows(rows: list[dict[str, Any]], columns: tuple[str, ...], as_json: bool) -> None:
    print(json.dumps(rows, indent=2) if as_json else format_table(rows, columns))


def _cmd_ps(args: argparse.Namespace) -> int:
    try:
        server = pick_server(args.pid)
        query = {k: v for k, v in (("mesh", args.mesh), ("state", args.state)) if v}
        rows = fetch(server, "/api/v1/actors", query)
        silent = [p for p in fetch(server, "/api/v1/procs") if p["state"] == "not answering"]
    except CliError as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        return 1
    if not args.json:
        for r in rows:
            r["for_s"] = None if r.get("running_for_s") is None else f"{r['running_for_s']:.1f}"
    _print_rows(rows, PS_COLUMNS, args.json)
    for p in silent:
        print(f"tetrarch: {p['name']} (pid {p['pid']} on {p['host']}) did not answer in time (stopped, or a C call "
              f"holds its GIL): its actors are not listed", file=sys.stderr)
    return 0


_ACTOR = re.compile(r"^(?P<mesh>[^\[\]]+)(\[(?P<rank>\d+)\])?$")


def format_stack(out: dict[str, Any]) -> str:
    """``tetrarch stack``'s text for the API's Stack record."""
    head = f"actor {out['actor']} (rank {out['rank']} of {out['mesh']}), pid {out['pid']} on {out['host']}"
    lines = [f"{head}: {out['state']}"]
    if out["threads"]:
        lines.append("--- its proc's Python threads, as the proc sees them ---")
        for t in out["threads"]:
            mark = ""
            if t["actor"]:
                mark = f"   <- actor {t['actor']}" + (f", in {t['endpoint']!r}" if t["endpoint"] else ", idle")
            lines.append(f"Thread {t['id']} \"{t['name']}\"{mark}")
            lines.append(t["stack"].rstrip("\n"))
    if out["pyspy"]:
        lines.append("--- py-spy dump, taken by its host agent ---")
        lines.append(out["pyspy"].rstrip("\n"))
    lines.extend(f"note: {n}" for n in out["notes"])
    return "\n".join(lines)


def _cmd_stack(args: argparse.Namespace) -> int:
    m = _ACTOR.match(args.actor)
    if m is None:
        print(f"tetrarch: name the actor as MESH[RANK], e.g. trainer[3]; got {args.actor!r}", file=sys.stderr)
        return 2
    try:
        server = pick_server(args.pid)
        rank = m.group("rank")
        if rank is None:
            sizes = [x["actors"] for x in fetch(server, "/api/v1/meshes") if x["name"] == m.group("mesh")]
            if sizes and sizes[0] != 1:
                raise CliError(f"actor mesh {m.group('mesh')!r} has {sizes[0]} actors: say which, e.g. "
                               f"{m.group('mesh')}[0]")
            rank = "0"
        out = fetch(server, "/api/v1/stack", {"mesh": m.group("mesh"), "rank": rank})
    except CliError as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2) if args.json else format_stack(out))
    return 0


DEBUG_COLUMNS = ("id", "actor", "mesh", "rank", "where", "pid", "host")


def _attach(session: dict[str, Any]) -> int:
    """Bridge this terminal and the paused actor's pdb until the session ends."""
    host, _, port = session["address"].rpartition(":")
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=REQUEST_TIMEOUT_S)
    except OSError as exc:
        print(f"tetrarch: cannot reach {session['actor']} at {session['address']}: {exc}", file=sys.stderr)
        return 1
    conn.settimeout(None)
    conn.sendall(f"{session['token']}\n".encode())
    done = threading.Event()

    def pump() -> None:
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                data = b""
            if not data:
                done.set()
                return
            sys.stdout.write(data.decode("utf-8", "replace"))
            sys.stdout.flush()

    reader = threading.Thread(target=pump, name="tetrarch-debug", daemon=True)
    reader.start()
    try:
        while not done.is_set():
            ready, _, _ = select.select([sys.stdin], [], [], 0.2)  # also notice the session's end
            if not ready:
                continue
            line = sys.stdin.readline()
            if not line:  # no more input: let the actor go on rather than leave it paused
                conn.sendall(b"c\n")
                break
            conn.sendall(line.encode())
    except (OSError, KeyboardInterrupt):
        pass
    reader.join(REQUEST_TIMEOUT_S)
    conn.close()
    print(f"\ndetached from {session['actor']}", file=sys.stderr)
    return 0


def _cmd_debug(args: argparse.Namespace) -> int:
    try:
        server = pick_server(args.pid)
        sessions = fetch(server, "/api/v1/debug")
    except CliError as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        return 1
    if args.list or (not sessions and not args.attach):
        if sessions:
            print(format_table(sessions, DEBUG_COLUMNS))
        else:
            print("no actor is paused in breakpoint()", file=sys.stderr)
        return 0
    chosen = sessions
    if args.attach:
        chosen = [s for s in sessions if args.attach in (s["id"], f"{s['mesh']}[{s['rank']}]")]
        if not chosen:
            paused = ", ".join(f"{s['mesh']}[{s['rank']}]" for s in sessions) or "none"
            print(f"tetrarch: no paused actor is {args.attach!r}; paused: {paused}", file=sys.stderr)
            return 1
    if len(chosen) > 1:
        print(format_table(chosen, DEBUG_COLUMNS))
        print("tetrarch: several actors are paused: say which with --attach MESH[RANK] (or its id)", file=sys.stderr)
        return 1
    return _attach(chosen[0])


DOCTOR_COLUMNS = ("status", "kind", "name", "latency_ms", "pid", "host", "detail")


def doctor_mesh(args: argparse.Namespace) -> int:
    """``tetrarch doctor mesh``: probe a running program's host agents, procs and actors; 1 if any failed."""
    try:
        server = pick_server(args.pid)
        checks = fetch(server, "/api/v1/probe", {"slow_ms": str(args.slow_ms)})
    except CliError as exc:
        print(f"tetrarch: {exc}", file=sys.stderr)
        return 1
    _print_rows(checks, DOCTOR_COLUMNS, args.json)
    if not args.json:
        counts = {s: sum(c["status"] == s for c in checks) for s in ("pass", "slow", "fail")}
        print(f"{counts['pass']} pass, {counts['slow']} slow (over {args.slow_ms:g} ms), {counts['fail']} fail")
    return 1 if any(c["status"] == "fail" for c in checks) else 0


def add_commands(sub: Any) -> None:
    """Add ``ps``, ``stack`` and ``debug`` to the ``tetrarch`` command line's subcommands."""
    ps = sub.add_parser("ps", help="list the actors of a running program (its admin API): mesh, rank, state, "
                                   "queue, running endpoint")
    ps.add_argument("--json", action="store_true", help="print the API's JSON records")
    ps.add_argument("--mesh", help="only the actors of the actor mesh of this name")
    ps.add_argument("--state", choices=["idle", "busy", "stopped", "failed"], help="only those in this state")
    ps.add_argument("--pid", type=int, help="the client program's pid, when several run")
    ps.set_defaults(func=_cmd_ps)
    stack = sub.add_parser("stack", help="print the stacks of an actor's proc (MESH[RANK]): its Python threads, "
                                         "the actor's marked, and py-spy's dump when py-spy is installed")
    stack.add_argument("actor", metavar="MESH[RANK]", help="the actor, e.g. trainer[3]")
    stack.add_argument("--json", action="store_true", help="print the API's JSON record")
    stack.add_argument("--pid", type=int, help="the client program's pid, when several run")
    stack.set_defaults(func=_cmd_stack)
    debug = sub.add_parser("debug", help="attach pdb to an actor paused in breakpoint() (n, s, p, c, bt, ...)")
    debug.add_argument("--attach", metavar="MESH[RANK]", help="the paused actor (or its id), when several are")
    debug.add_argument("--list", action="store_true", help="list the paused actors and exit")
    debug.add_argument("--pid", type=int, help="the client program's pid, when several run")
    debug.set_defaults(func=_cmd_debug)
