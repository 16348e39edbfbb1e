"""Programs in fresh interpreters, for tests: run one to its end or start one, bounded, nothing left running.

A test that needs a process of its own (a client that is killed, a program whose exit is
the point) runs a *scenario*: a Python file started with ``sys.executable`` in a session of
its own. :func:`run_scenario` waits for it (``scaled(timeout)`` seconds; past that its
threads' stacks are dumped with faulthandler, its process group killed and the test
fails with its output); :class:`Started` starts programs and kills whatever still runs in
their process groups when closed. Tetrarch's suite and its plugins' suites share these;
:func:`require_isolated` is the rule their fixtures apply (such a test is marked
``isolated``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ._timing import scaled

__all__ = ["PathLike", "Started", "require_isolated", "run_python", "run_scenario"]

PathLike = str | os.PathLike[str]


def _tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def _child_env(env: Mapping[str, str] | None, pythonpath: Sequence[PathLike]) -> dict[str, str]:
    """This process's environment (so the session marker) updated by ``env``, with
    ``pythonpath`` put in front of ``PYTHONPATH`` (what the suite runs with stays on it)."""
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONFAULTHANDLER", "1")
    if env:
        full_env.update(env)
    if pythonpath:
        parts = [os.fspath(p) for p in pythonpath] + [full_env.get("PYTHONPATH", "")]
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    return full_env


def _run(
    what: str,
    cmd: list[str],
    timeout: float,
    env: Mapping[str, str] | None,
    pythonpath: Sequence[PathLike],
    cwd: PathLike | None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own session with ``scaled(timeout)`` seconds to exit.

    Output goes to temporary files, not pipes, so a grandchild that keeps them open
    cannot make the call wait past the child's exit. On timeout the child is asked to
    dump its threads' tracebacks (faulthandler, SIGABRT), its process group is killed,
    and the test fails with the captured output.
    """
    limit = scaled(timeout)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=_child_env(env, pythonpath),
            cwd=cwd, text=True, start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop_timed_out(proc)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if timed_out:
        pytest.fail(
            f"{what} did not exit within {limit:g} s and was killed\n"
            f"--- stdout ---\n{_tail(stdout)}\n--- stderr ---\n{_tail(stderr)}",
            pytrace=False,
        )
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _stop_timed_out(proc: subprocess.Popen[str]) -> None:
    try:
        proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
        proc.wait(timeout=scaled(3))
    except subprocess.TimeoutExpired:
        pass
    _kill_group(proc)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and whatever stayed in its group
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_scenario(
    path: PathLike,
    *args: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
    pythonpath: Sequence[PathLike] = (),
    cwd: PathLike | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the program at ``path`` (``sys.executable path *args``) and capture its output.

    Args:
        timeout: nominal seconds the program has to exit (multiplied by the
            ``TETRARCH_TEST_SLOWDOWN`` factor); past that its stacks are dumped, its
            process group is killed and the test fails with its output.
        env: variables to set on top of this process's environment.
        pythonpath: folders put in front of the inherited ``PYTHONPATH`` (e.g. where
            the actor modules live, so the program and the procs it spawns import them).
        cwd: the working directory.

    The return code is not checked: assert on it.
    """
    return _run(f"scenario {Path(path).name}", [sys.executable, os.fspath(path), *args], timeout, env,
                pythonpath, cwd)


def run_python(
    code: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) with ``sys.executable -c``, like :func:`run_scenario`.

    Kept for programs that cannot move into a scenario module yet; prefer a scenario.
    """
    return _run("python snippet", [sys.executable, "-c", textwrap.dedent(code)], timeout, env, (), None)


def require_isolated(request: pytest.FixtureRequest) -> None:
    """Fail the test unless it is marked ``isolated`` (it runs a fresh interpreter)."""
    if request.node.get_closest_marker("isolated") is None:
        pytest.fail(f"{request.node.nodeid} runs a fresh interpreter: mark it @pytest.mark.isolated",
                    pytrace=False)


class Started:
    """Programs started for one test (:meth:`start`); :meth:`close` kills what runs in their process groups."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[str]] = []

    def start(self, path: PathLike, *args: str, env: Mapping[str, str] | None = None,
              pythonpath: Sequence[PathLike] = (), **popen_kwargs: Any) -> subprocess.Popen[str]:
        """Start the program at ``path`` in a fresh ``sys.executable`` (its own session, environment as for
        :func:`run_scenario`) and return at once; ``popen_kwargs`` go to ``subprocess.Popen`` (``text=True``).

        Raises:
            OSError: the interpreter cannot be started.
        """
        proc = subprocess.Popen([sys.executable, os.fspath(path), *args], env=_child_env(env, pythonpath),
                                text=True, start_new_session=True, **popen_kwargs)
        self._procs.append(proc)
        return proc

    def close(self) -> None:
        """Kill every started program's process group and close its pipes. Never raises."""
        for proc in self._procs:
            _kill_group(proc)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        self._procs.clear()
