"""The admin API of a running program: its hosts, procs, actors, meshes and failures over HTTP.

::

    import tetrarch.admin
    server = tetrarch.admin.serve()      # or configure(admin=True) / TETRARCH_ADMIN=1 before the first mesh
    print(server.url)                    # e.g. http://127.0.0.1:41234; `tetrarch ps` finds it by itself

Every request carries the server's token (``Authorization: Bearer <token>``), which a 0600
file per client announces to the command-line tools (:func:`find_servers`). The API is
described at ``/openapi.json``; docs/observability.md has curl examples and what it costs.
"""

from __future__ import annotations

import threading

from ._admin._server import AdminServer, is_loopback, start_server
from ._admin._token import ServerInfo, find_servers
from ._config import ADMIN_HOST, ADMIN_PORT
from ._errors import ArgumentError, UsageError

__all__ = ["AdminServer", "ServerInfo", "find_servers", "serve", "server"]

_lock = threading.Lock()
_running: list[AdminServer] = []


def serve(host: str | None = None, port: int | None = None, *, allow_remote: bool = False) -> AdminServer:
    """Serve this client's admin API (starting its runtime if needed); the running server if there is one
    (whatever ``host`` and ``port`` say).

    ``host``/``port`` default to the ``admin_host``/``admin_port`` settings (loopback, a free port).

    Raises:
        ArgumentError: ``host`` is not a loopback address and neither ``allow_remote`` nor the
            ``admin_host`` setting asks for it.
        UsageError: called in a proc (the admin server belongs to the client).
        ImportError: Starlette or Uvicorn is missing (``pip install "tetrarch[admin]"``).
        OSError: the address cannot be bound, or the announcement file cannot be written.
    """
    from ._runtime.process._root import get_root, on_client_exit

    remote = allow_remote or (host is None and ADMIN_HOST.source() != "default")
    bind = ADMIN_HOST() if host is None else host
    if not remote and not is_loopback(bind):
        raise ArgumentError(f"the admin server binds loopback only unless told otherwise: got host {bind!r}; pass "
                            f"allow_remote=True (or set TETRARCH_ADMIN_HOST) to serve other machines")
    with _lock:
        if _running and _running[0].running:
            return _running[0]
        root = get_root()
        if root.role != "client":
            raise UsageError("the admin server is served by the client program, not by a proc")
        srv = start_server(root, bind, ADMIN_PORT() if port is None else port, remote)
        _running[:] = [srv]
        on_client_exit(srv.stop)
        return srv


def server() -> AdminServer | None:
    """This client's running admin server, if any."""
    with _lock:
        return _running[0] if _running and _running[0].running else None
