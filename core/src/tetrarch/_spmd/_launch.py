"""Starting the job server (``_server``) from ``serve()`` and waiting until its ranks are up.

The launcher process reads the job's spec (JSON) on stdin, forks the server and exits;
the server reports on an inherited pipe (the ready fd): first ``{"pid": N}``, then
``{"ok": true}`` once its ranks are up and its state file written, or ``{"ok": false,
"error": ...}``. Its stdout and stderr (what no caller receives) go to a log file beside
the state file.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from ._errors import SPMDJobError

__all__ = ["launch_server"]

#: Longest Unix socket path used beside the state file (the kernel's limit is 107 bytes).
_MAX_SOCKET_PATH = 100
_LOG_TAIL = 4000


def _socket_path(state_path: str) -> tuple[str, str]:
    """The control socket's path beside the state file, else in a fresh 0700 temporary folder (and that folder)."""
    beside = os.path.splitext(state_path)[0] + ".sock"
    if len(beside.encode()) <= _MAX_SOCKET_PATH:
        return beside, ""
    folder = tempfile.mkdtemp(prefix="tetrarch-spmd-")
    return os.path.join(folder, "control.sock"), folder


def _log_tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _read_reports(fd: int, deadline: float, reports: list[dict[str, Any]]) -> bool:
    """Append the JSON lines on ``fd`` to ``reports`` until EOF or a final report; whether ``deadline`` passed first."""
    data = b""
    while not (reports and "ok" in reports[-1]):
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return False
        *lines, data = (data + chunk).split(b"\n")
        reports.extend(json.loads(line) for line in lines if line.strip())
    return False


def _terminate(reports: list[dict[str, Any]]) -> int:
    """SIGTERM the server whose pid ``reports`` hold (it did not come up in time, or we were interrupted)."""
    pid = next((int(r["pid"]) for r in reports if "pid" in r), 0)
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    return pid


def launch_server(spec: dict[str, Any], env: dict[str, str], timeout: float) -> int:
    """Start the job server for ``spec`` with environment ``env``; its pid once its ranks are up.

    Raises:
        SPMDJobError: the server could not start the job (the message carries its error and log).
        TimeoutError: not up within ``timeout`` seconds (the server was terminated).
    """
    log_path = os.path.splitext(spec["state_path"])[0] + ".log"
    spec = {**spec, "log_path": log_path}
    spec["socket_path"], spec["socket_dir"] = _socket_path(spec["state_path"])
    read_fd, write_fd = os.pipe()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "tetrarch._spmd._server", "--ready-fd", str(write_fd)],
            stdin=subprocess.PIPE, stdout=log_fd, stderr=log_fd, pass_fds=(write_fd,), env=env, cwd=spec["cwd"])
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
        os.close(log_fd)
    try:
        assert launcher.stdin is not None
        launcher.stdin.write(json.dumps(spec).encode())
        launcher.stdin.close()
        launcher.wait()  # it forks the server and exits at once
        reports: list[dict[str, Any]] = []
        try:
            late = _read_reports(read_fd, time.monotonic() + timeout, reports)
        except BaseException:  # e.g. Ctrl-C while the ranks start: leave no server behind
            _terminate(reports)
            raise
    finally:
        os.close(read_fd)
    final = reports[-1] if reports and "ok" in reports[-1] else None
    if late:
        pid = _terminate(reports)
        raise TimeoutError(f"the SPMD job server (pid {pid}) did not have its ranks up within {timeout} s; it was "
                           f"stopped. Its log ({log_path}):\n{_log_tail(log_path)}")
    if final is None or not final["ok"]:
        why = final["error"] if final else f"it ended without a word (launcher exit status {launcher.returncode})"
        raise SPMDJobError(f"the SPMD job server could not start the job: {why}\nIts log ({log_path}):\n"
                           f"{_log_tail(log_path)}")
    return int(final["pid"])
