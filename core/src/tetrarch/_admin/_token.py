"""Where a client's admin server is announced: one 0600 JSON file per client process.

``$TETRARCH_ADMIN_DIR``, else ``$XDG_RUNTIME_DIR/tetrarch/admin``, else
``~/.cache/tetrarch/admin``; the file is named after the client's pid and holds the
server's URL, its bearer token, the pid and the script, so the CLI can tell several
running programs apart. Removed when the server stops; a file left by a process that is
gone is skipped (and removed) by :func:`find_servers`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .._config import ADMIN_DIR
from .._runtime.plumbing._dirs import user_dir
from .._runtime.plumbing._proc_state import process_gone

__all__ = ["ServerInfo", "admin_dir", "find_servers", "remove_announcement", "write_announcement"]


@dataclass(frozen=True)
class ServerInfo:
    """A running client's admin server, as its announcement file says."""

    pid: int
    script: str
    url: str
    token: str
    started: float
    path: Path


def admin_dir() -> Path:
    """The folder of the announcement files (created 0700 when written to)."""
    configured = ADMIN_DIR()
    if configured:
        return Path(configured)
    return user_dir("admin")


def _script() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.basename(path) if path else (sys.argv[0] or "python")


def write_announcement(url: str, token: str) -> Path:
    """Write this process's announcement (0600, atomically); returns its path.

    Raises:
        OSError: the folder cannot be created or written.
    """
    folder = admin_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{os.getpid()}.json"
    tmp = folder / f".{os.getpid()}.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": os.getpid(), "script": _script(), "url": url, "token": token, "started": time.time()}, f)
    os.replace(tmp, path)
    return path


def remove_announcement(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def find_servers() -> list[ServerInfo]:
    """The admin servers of running clients, oldest first (stale files are removed)."""
    folder = admin_dir()
    found: list[ServerInfo] = []
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            data = json.loads(path.read_text())
            info = ServerInfo(int(data["pid"]), str(data["script"]), str(data["url"]), str(data["token"]),
                              float(data["started"]), path)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if process_gone(info.pid):
            remove_announcement(path)
            continue
        found.append(info)
    return sorted(found, key=lambda s: s.started)
