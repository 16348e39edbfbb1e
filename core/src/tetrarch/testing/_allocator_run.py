"""The test side of the allocator kit: running its client program, and what an allocation left running.

:class:`ClientRun` starts ``python -m tetrarch.testing._allocator_client CHECK CONFIG`` in a
session of its own and collects its reports (:mod:`._allocator_client`) as they arrive;
every wait is bounded, and a client still running when the test ends is killed.
:func:`left_running` finds the processes of an allocation by the variable all of them carry.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from typing import IO, Any

from ._allocator_client import PREFIX, RUN_ENV, encode
from ._timing import scaled

__all__ = ["ClientRun", "left_running", "new_run"]

#: Nominal seconds the client gets to dump its threads (SIGABRT, faulthandler) before it is killed.
_DUMP_S = 3.0


def new_run() -> str:
    """A fresh value of :data:`RUN_ENV`: it marks the processes of one allocation."""
    return uuid.uuid4().hex


class ClientRun:
    """One run of the kit's client program (use as a context manager: a client left running is killed).

    Args:
        check: the client's check (``serve``, ``agent_killed``, ``hold``, ``exit_reports``, ``bad_options``).
        config: its configuration (see :mod:`._allocator_client`).
        env: variables set for the client on top of this process's environment.
        cwd: its working directory.
    """

    def __init__(self, check: str, config: dict[str, Any], env: Mapping[str, str], cwd: str) -> None:
        self.check = check
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._other: list[str] = []
        full_env = {**os.environ, "PYTHONFAULTHANDLER": "1", **env}
        # Folders this process imports from (a plugin's tests may add its source folder): the client's too.
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, full_env.get("PYTHONPATH", "")] if p)
        self._stderr: IO[str] = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tetrarch.testing._allocator_client", check, encode(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=full_env, cwd=cwd, text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"allocator-kit-{check}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                if line.startswith(PREFIX):
                    self.events.append(json.loads(line[len(PREFIX):]))
                else:
                    self._other.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def report(self) -> dict[str, Any]:
        """Every report so far, merged into one dict (a later key wins)."""
        with self._cond:
            merged: dict[str, Any] = {}
            for event in self.events:
                merged.update(event)
            return merged

    def wait_for(self, key: str, timeout: float) -> Any:
        """The value of the first report holding ``key``, waiting up to ``scaled(timeout)`` s for it.

        Raises:
            AssertionError: it did not come in time, or the client ended first (the message has its output).
        """
        deadline = time.monotonic() + scaled(timeout)
        with self._cond:
            while True:
                for event in self.events:
                    if key in event:
                        return event[key]
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    break
                self._cond.wait(min(left, 0.5))  # woken by each line; the bound only covers a silent exit
        raise AssertionError(f"the allocator kit's client ({self.check}) reported no {key!r} within "
                             f"{scaled(timeout):g} s\n{self.describe()}")

    def finish(self, timeout: float) -> dict[str, Any]:
        """Wait up to ``scaled(timeout)`` s for the client to exit 0; its merged reports.

        Raises:
            AssertionError: it did not exit in time (its threads' stacks are in the message) or
                exited with another status.
        """
        try:
            self.proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            self._stop()
            raise AssertionError(f"the allocator kit's client ({self.check}) did not finish within "
                                 f"{scaled(timeout):g} s and was killed\n{self.describe()}") from None
        self._reader.join(scaled(5))
        if self.proc.returncode != 0:
            raise AssertionError(f"the allocator kit's client ({self.check}) exited with status "
                                 f"{self.proc.returncode}\n{self.describe()}")
        return self.report()

    def kill(self) -> None:
        """SIGKILL the client (only it: what it started must end by itself) and reap it."""
        try:
            os.kill(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def _stop(self) -> None:
        """Dump the client's stacks (SIGABRT: faulthandler), then kill its process group."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGABRT)
                self.proc.wait(scaled(_DUMP_S))
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def describe(self) -> str:
        """The client's exit status, other stdout and stderr (their ends), for an assertion message."""
        self._stderr.seek(0)
        err = self._stderr.read()
        with self._cond:
            out = "".join(self._other)
        return (f"--- client exit status: {self.proc.poll()}\n--- reports: {self.events!r:.4000}\n"
                f"--- other stdout:\n{out[-3000:]}\n--- stderr:\n{err[-6000:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self._stop()
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self._reader.join(scaled(5))
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()

    def __enter__(self) -> ClientRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _marked(run: str) -> list[Any]:
    """Live processes of this machine (not zombies) whose environment has ``RUN_ENV=run``."""
    import psutil  # type: ignore[import-untyped]  # a test dependency without stubs

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(RUN_ENV) == run and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue  # gone, or not ours to read
    return found


def left_running(run: str, timeout: float) -> list[str]:
    """The processes of this machine marked ``run`` still running after up to ``scaled(timeout)`` s.

    Each as ``"pid N: command line"``; an empty list when every one ended in time. Scans again
    whenever all it found ended: a process may have started others before it did.
    """
    import psutil

    deadline = time.monotonic() + scaled(timeout)
    while True:
        found = _marked(run)
        if not found:
            return []
        _gone, alive = psutil.wait_procs(found, timeout=max(0.0, deadline - time.monotonic()))
        alive = [p for p in alive if _running(p)]
        if alive or time.monotonic() >= deadline:
            return [_describe(p) for p in alive or _marked(run)]


def _running(proc: Any) -> bool:
    import psutil

    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _describe(proc: Any) -> str:
    import psutil

    try:
        return f"pid {proc.pid}: {' '.join(proc.cmdline()) or proc.name()}"
    except psutil.Error:
        return f"pid {proc.pid}: <gone>"
