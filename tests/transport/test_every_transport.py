"""The kernel suite once per transport (issue 11, point 3).

``make test`` (one pytest command) runs the whole suite on the transport selection
gives here (``ipc`` by default: core's highest priority; set ``TETRARCH_TRANSPORT`` to
change it). Then this module runs tests/kernel (with the examples' tests) again in a
fresh pytest per further transport, with ``TETRARCH_TRANSPORT=<name>``, so every proc of
every allocation uses it (docs/plugins.md, "Testing a transport").

Which transports: ``--transports`` (an option of this suite, default ``auto``):

* ``auto``: every first-party plugin transport (zmq, nng) and every installed
  third-party one: each gets a pass, or is **skipped with its status and reason**
  (not installed, not implemented, its library missing: its probe's words) — never
  silently passed;
* ``all``: those and core's other builtin transport too (``tcp`` when the main pass ran
  on ``ipc``): about 2 more minutes on a 2-core machine;
* ``none``, or names: ``--transports=tcp,zmq``.

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

import re
from pathlib import Path

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


@pytest.mark.isolated
@pytest.mark.slow
@pytest.mark.timeout(scaled(PASS_LIMIT_S + 60))
def test_the_kernel_suite_passes_on(transport: str, run_scenario) -> None:
    row = Registry().status(T, transport)
    if row.status is not Status.AVAILABLE:
        where = f"{row.distribution} {row.version}".strip()
        pytest.skip(f"transport {transport!r} ({where}) is {row.status.value}: "
                    + "; ".join(x for x in (row.reason, row.hint) if x))
    res = run_scenario(SCENARIO, timeout=PASS_LIMIT_S, env={"TETRARCH_TRANSPORT": transport})
    lines = res.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    if res.returncode != 0:
        pytest.fail(f"the kernel suite on TETRARCH_TRANSPORT={transport} exited {res.returncode}: {summary}\n"
                    f"--- its output (tail) ---\n{res.stdout[-8000:]}\n--- stderr (tail) ---\n{res.stderr[-3000:]}",
                    pytrace=False)
    assert re.search(r"\d+ passed", summary), res.stdout[-3000:]
