"""The admin HTTP server: Starlette on Uvicorn, in a thread of the client, behind a bearer token."""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
import time
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from .._errors import ArgumentError, TelemetryQueryError
from .._log import get_logger
from .._runtime.actors._debug import SESSIONS
from .._runtime.services._stack import DUMP_TIMEOUT_S
from .._version import __version__
from ._dashboard import PAGE
from ._openapi import API_PREFIX, document
from ._snapshot import Snapshot
from ._token import remove_announcement, write_announcement

__all__ = ["AdminServer", "is_loopback", "start_server"]

_log = get_logger("admin")

#: Seconds a request waits for the procs' answers (those that did not answer are "not answering").
ANSWER_TIMEOUT_S = 1.0
#: Seconds the server has to start listening.
START_TIMEOUT_S = 10.0


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP or ``localhost``) only reaches this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AdminServer:
    """A running admin server; :meth:`stop` ends it (also at the client's exit)."""

    def __init__(self, url: str, token: str, announcement: Path, server: Any, thread: threading.Thread) -> None:
        #: Where it serves, e.g. ``http://127.0.0.1:41234``.
        self.url = url
        #: The bearer token every request must carry (``Authorization: Bearer <token>``).
        self.token = token
        #: The 0600 file that announces it to ``tetrarch ps`` and the other tools.
        self.announcement = announcement
        self._server = server
        self._thread = thread

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and remove the announcement (idempotent)."""
        SESSIONS.unavailable = "the program's admin server was stopped: no debugger can attach"
        remove_announcement(self.announcement)
        self._server.should_exit = True
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def __repr__(self) -> str:
        return f"<AdminServer {self.url}{'' if self.running else ' (stopped)'}>"


#: What ``/telemetry/query`` answers without a statement: the tables and their columns.
TABLES_SQL = ("SELECT table_name AS \"table\", column_name AS \"column\", data_type AS type "
              "FROM information_schema.columns WHERE NOT starts_with(table_name, '_t_') "
              "ORDER BY table_name, ordinal_position")


def _telemetry_query(sql: str) -> dict[str, Any]:
    """``GET /telemetry/query``: SQL over every host's telemetry (docs/telemetry.md).

    Raises:
        TelemetryQueryError: the statement fails.
    """
    from .._runtime.meshes._telemetry import telemetry
    from .._telemetry._query import as_json

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the missing hosts are in the answer
        tel = telemetry()
        table = tel.query(sql, timeout=ANSWER_TIMEOUT_S * 4)
    return as_json(table, tel.missing)


def _app(root: Any, token: str) -> Any:
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse
    from starlette.routing import Route

    expected = f"Bearer {token}".encode()
    spec = document(__version__)

    def unauthorized() -> JSONResponse:
        return JSONResponse({"error": "unauthorized"}, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    def snapshot() -> Snapshot:
        return Snapshot(root, ANSWER_TIMEOUT_S)

    async def openapi(_request: Request) -> JSONResponse:
        return JSONResponse(spec)

    def listing(fn: Any) -> Any:
        async def endpoint(request: Request) -> JSONResponse:
            rows = await run_in_threadpool(lambda: fn(snapshot()))
            filters = {k: v for k, v in request.query_params.items() if k in ("mesh", "state")}
            if filters and isinstance(rows, list):
                rows = [r for r in rows if all(str(r.get(k)) == v for k, v in filters.items())]
            return JSONResponse(rows)

        return endpoint

    async def stack(request: Request) -> JSONResponse:
        mesh, rank = request.query_params.get("mesh"), request.query_params.get("rank", "")
        if not mesh or not rank.isdigit():
            return JSONResponse({"error": "name the actor: ?mesh=NAME&rank=N"}, status_code=400)
        try:
            out = await run_in_threadpool(lambda: snapshot().stack(mesh, int(rank), DUMP_TIMEOUT_S))
        except LookupError as exc:
            return JSONResponse({"error": str(exc.args[0])}, status_code=404)
        return JSONResponse(out)

    async def probe(request: Request) -> JSONResponse:
        slow = request.query_params.get("slow_ms", "100")
        try:
            slow_s = float(slow) / 1e3
        except ValueError:
            return JSONResponse({"error": f"slow_ms must be a number of milliseconds, got {slow!r}"}, status_code=400)
        return JSONResponse(await run_in_threadpool(lambda: snapshot().probe(slow_s)))

    async def telemetry_query(request: Request) -> JSONResponse:
        sql = request.query_params.get("sql") or TABLES_SQL
        try:
            return JSONResponse(await run_in_threadpool(lambda: _telemetry_query(sql)))
        except TelemetryQueryError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    async def dashboard(_request: Request) -> HTMLResponse:
        return HTMLResponse(PAGE, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})

    async def debug(_request: Request) -> JSONResponse:
        return JSONResponse(SESSIONS.list())

    routes = [Route("/openapi.json", openapi), Route("/dashboard", dashboard), Route(f"{API_PREFIX}/stack", stack),
              Route(f"{API_PREFIX}/debug", debug),
              Route(f"{API_PREFIX}/probe", probe), Route(f"{API_PREFIX}/telemetry/query", telemetry_query)]
    for name, fn in (("hosts", Snapshot.hosts), ("procs", Snapshot.procs), ("actors", Snapshot.actors),
                     ("meshes", Snapshot.meshes), ("failures", Snapshot.failures), ("backends", Snapshot.backends)):
        routes.append(Route(f"{API_PREFIX}/{name}", listing(fn)))
    app = Starlette(routes=routes)

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if scope.get("path") == "/dashboard" and not given:  # a browser's first load: ?token=...
                query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
                given = f"Bearer {(query.get('token') or [''])[0]}".encode()
            if not hmac.compare_digest(given, expected):
                await unauthorized()(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded


def start_server(root: Any, host: str, port: int, allow_remote: bool) -> AdminServer:
    """Serve the admin API for the client whose runtime is ``root``.

    Raises:
        ArgumentError: ``host`` is not a loopback address and ``allow_remote`` is False.
        ImportError: Starlette or Uvicorn is not installed (the message names the pip command).
        OSError: the address cannot be bound, or the announcement file cannot be written.
    """
    if not is_loopback(host) and not allow_remote:
        raise ArgumentError(f"the admin server binds loopback only unless told otherwise: got host {host!r}; pass "
                            f"allow_remote=True (or set TETRARCH_ADMIN_HOST) to serve other machines")
    try:
        import uvicorn
    except ImportError as exc:
        raise ImportError(f"the admin server needs Starlette and Uvicorn ({exc}): "
                          f"pip install \"tetrarch[admin]\"") from exc
    token = secrets.token_urlsafe(32)
    config = uvicorn.Config(_app(root, token), host=host, port=port, log_level="warning", access_log=False,
                            lifespan="off", loop="asyncio")
    server = uvicorn.Server(config)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            server.run()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller of start_server
            failed.append(exc)

    thread = threading.Thread(target=run, name="tetrarch-admin", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        thread.join(0.005)  # uvicorn says it listens through a flag only
    if not server.started:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        why = failed[0] if failed else "it did not start listening"
        raise OSError(f"the admin server could not listen on {host}:{port}: {why}")
    bound = server.servers[0].sockets[0].getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    url = f"http://{shown}:{bound[1]}"
    try:
        announcement = write_announcement(url, token)
    except OSError:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        raise
    _log.info("admin API at %s (token in %s)", url, announcement)
    SESSIONS.unavailable = ""  # breakpoint() in actors now waits for `tetrarch debug`
    return AdminServer(url, token, announcement, server, thread)

