"""The kernel suite once per transport (issue 11, point 3).

``make test`` (one pytest command) runs the whole suite on the transport selection
gives here (``ipc`` by default: core's highest priority; set ``TETRARCH_TRANSPORT`` to
change it). ``make test-transports`` (CI runs it next) runs this module: tests/kernel
(with the examples' tests) again in a fresh pytest per further transport, with
``TETRARCH_TRANSPORT=<name>``, so every proc of every allocation uses it (docs/plugins.md,
"Testing a transport"). ``make test`` passes ``--transports=none`` to stay under 12
minutes on 2 cores; a plain ``pytest`` runs the passes as well.

Which transports: ``--transports`` (an option of this suite, default ``auto``):

* ``auto``: every first-party plugin transport (zmq, nng) and every installed
  third-party one: each gets a pass, or is **skipped with its status and reason**
  (not installed, not implemented, its library missing: its probe's words) — never
  silently passed;
* ``all``: those and core's other builtin transport too (``tcp`` when the main pass ran
  on ``ipc``): about 2 more minutes on a 2-core machine;
* ``none``, or names: ``--transports=tcp,zmq``.

The passes of the different transports run **at the same time** (each in its own pytest
and process group, started when the first of them is reached): each spends most of its
time waiting on processes and sockets, so two of them side by side take little longer
than one, about a minute less of ``make test`` on a 2-core machine.

Per transport only the tests that can depend on it run: tests marked
``transport_independent`` ran in the main pass already and are left out (pytest.ini,
``markers``). The rule, for every test added to tests/kernel:

* **leave it unmarked** (it runs once per transport) if it sends anything across
  processes over the suite's transport: calls and replies, spawns, ports, forwarded
  output, stop, supervision and failure notices, a dropped or refused connection, an
  exit while connections are open. When in doubt, leave it unmarked.
* **mark it** ``@pytest.mark.transport_independent`` (with a comment saying why) if no
  message of the suite's transport is involved: pure logic (shapes, serialization,
  errors raised before any call, config), a transport the test pins itself
  (``TETRARCH_TRANSPORT=tcp`` in its scenario, a bare ``IpcTransport``; such a test's
  params for other transports are marked, as test_transport_choice.py does), a child
  process that never connects (the secret's pipe, cross-memory attach, a start that fails
  before the first dial), or OS-level stalls (SIGSTOP) and timings the transport cannot
  change. A whole module: put the mark in its ``pytestmark``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tetrarch._plugins import BackendKind, Registry, Status
from tetrarch._plugins._rows import is_absent
from tetrarch.testing import scaled

SCENARIO = Path(__file__).parent / "scenarios" / "kernel_pass.py"
#: Nominal seconds one pass may take (about 2 minutes on this 2-core machine).
PASS_LIMIT_S = 480
T = BackendKind.TRANSPORT


def _chosen(option: str, registry: Registry) -> list[str]:
    """The transports ``--transports=option`` asks for, other than the one the main pass uses."""
    rows = registry.statuses(T)
    main = registry.select(T).name
    if option == "none":
        return []
    if option in ("auto", "all"):
        names = {r.name for r in rows if r.distribution != "tetrarch" or (option == "all" and not is_absent(r))}
    else:
        names = {n.strip() for n in option.split(",") if n.strip()}
        unknown = names - {r.name for r in rows}
        if unknown:
            raise pytest.UsageError(f"--transports names unknown transport(s) {sorted(unknown)}; known: "
                                    f"{', '.join(sorted(r.name for r in rows))}")
    return sorted(names - {main})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "transport" in metafunc.fixturenames:
        option = metafunc.config.getoption("--transports", default="auto")
        metafunc.parametrize("transport", _chosen(option, Registry()))


class _Pass:
    """One transport's kernel pass: a fresh pytest in its own session, output to temporary files."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.out: IO[str] = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in close()
        self.err: IO[str] = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in close()
        env = {**os.environ, "TETRARCH_TRANSPORT": transport}
        env.setdefault("PYTHONFAULTHANDLER", "1")
        self.proc = subprocess.Popen([sys.executable, os.fspath(SCENARIO)], stdout=self.out, stderr=self.err,
                                     stdin=subprocess.DEVNULL, env=env, text=True, start_new_session=True)

    def result(self, limit: float) -> subprocess.CompletedProcess[str]:
        """Wait up to ``limit`` seconds (from now) for the pass; on timeout dump its stacks, kill it, fail."""
        try:
            self.proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            try:
                self.proc.wait(timeout=scaled(3))
            except subprocess.TimeoutExpired:
                pass
            self.kill()
            pytest.fail(f"the kernel pass on {self.transport} did not end within {limit:g} s and was killed\n"
                        f"--- stdout ---\n{self._read(self.out)[-4000:]}\n--- stderr ---\n"
                        f"{self._read(self.err)[-4000:]}", pytrace=False)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, self._read(self.out),
                                           self._read(self.err))

    @staticmethod
    def _read(f: IO[str]) -> str:
        f.seek(0)
        return f.read()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the pytest and whatever stayed in its group
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        self.out.close()
        self.err.close()


def _available(transport: str) -> str | None:
    """None if ``transport`` can run here, else why not (its status and reason)."""
    row = Registry().status(T, transport)
    if row.status is Status.AVAILABLE:
        return None
    where = f"{row.distribution} {row.version}".strip()
    return f"transport {transport!r} ({where}) is {row.status.value}: " + "; ".join(
        x for x in (row.reason, row.hint) if x)


@pytest.fixture(scope="module")
def kernel_passes(request: pytest.FixtureRequest) -> Iterator[dict[str, _Pass]]:
    """Every chosen, available transport's pass, all started at once when the first is needed."""
    option = request.config.getoption("--transports", default="auto")
    passes = {t: _Pass(t) for t in _chosen(option, Registry()) if _available(t) is None}
    yield passes
    for p in passes.values():
        p.close()


@pytest.mark.isolated
@pytest.mark.slow
@pytest.mark.timeout(scaled(PASS_LIMIT_S + 60))
def test_the_kernel_suite_passes_on(transport: str, kernel_passes: dict[str, _Pass]) -> None:
    why_not = _available(transport)
    if why_not is not None:
        pytest.skip(why_not)
    res = kernel_passes[transport].result(scaled(PASS_LIMIT_S))
    lines = res.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    if res.returncode != 0:
        pytest.fail(f"the kernel suite on TETRARCH_TRANSPORT={transport} exited {res.returncode}: {summary}\n"
                    f"--- its output (tail) ---\n{res.stdout[-8000:]}\n--- stderr (tail) ---\n{res.stderr[-3000:]}",
                    pytrace=False)
    assert re.search(r"\d+ passed", summary), res.stdout[-3000:]
