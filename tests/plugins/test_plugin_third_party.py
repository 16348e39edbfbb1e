"""Acceptance: a transport from outside the repository's seven distributions joins without touching core.

The third party is the copyable template, ``examples/plugin_template`` (distribution
``tetrarch-plugin-template``, entry point ``template``; transport ``threaded`` serving
``tcp://``, allocator ``sandbox``). A copy of its folder is pip-installed into a
throwaway ``--target`` folder (``template_site``, tests/plugins/conftest.py: a real
``.dist-info`` with ``entry_points.txt``), which fresh interpreters get on
``PYTHONPATH``; the venv never sees it. Beside it sits the throwaway plugin that raises
on import (``broken_site``, tests/plugins/conftest.py).
With both on the path:

* ``tetrarch plugins`` lists ``threaded`` and ``sandbox`` as available under the
  distribution's name, ``kaboom`` as broken, and every other backend as it is without them;
* an actor program (two procs on ``this_host()``, a call to each) runs over ``threaded``,
  client and procs alike, selected by ``TETRARCH_TRANSPORT=threaded`` and, separately,
  by its qualified scheme in ``TETRARCH_LISTEN_ADDRESS=threaded+tcp://127.0.0.1:0``;
* the template's own tests (``TransportConformance`` among them) pass against the
  installed copy, not its source folder. The kit's pre-auth tests (``-k "not preauth"``)
  are left out there: they start a listening child on the same transport class whichever
  folder it came from, ran against the template in the main pass
  (examples/plugin_template/tests), and took most of the nested run's time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tetrarch._cli import plugin_rows
from tetrarch._plugins import Registry
from tetrarch.testing import scaled

pytestmark = [pytest.mark.isolated, pytest.mark.timeout(scaled(180))]

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "examples" / "plugin_template"
SCENARIOS = Path(__file__).parent / "scenarios"
DIST, VERSION = "tetrarch-plugin-template", "0.1.0"
_LITTER = ("build", "dist", "*.egg-info", "__pycache__", ".pytest_cache")  # as in conftest.py


def _env(*sites: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([*map(str, sites), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETRARCH_TRANSPORT", "TETRARCH_LISTEN"))}
    return {**env, "PYTHONPATH": path, **extra}


def _tetrarch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tetrarch", *args], capture_output=True, text=True,
                          timeout=scaled(30), env=env)


def test_plugins_lists_it_with_its_distribution_beside_a_broken_one(template_site: Path, broken_site: Path) -> None:
    env = _env(template_site, broken_site)
    result = _tetrarch("plugins", "--json", env=env)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    mine = {(r["kind"], r["backend"]): r for r in rows if r["distribution"] == DIST}
    assert set(mine) == {("transport", "threaded"), ("allocator", "sandbox")}
    assert all((r["status"], r["version"]) == ("available", VERSION) for r in mine.values()), mine
    (broken,) = [r for r in rows if r["distribution"] == "tetrarch-test-broken"]
    assert (broken["kind"], broken["backend"], broken["status"]) == ("plugin", "kaboom", "broken")
    def standing(rs: list[dict[str, str]]) -> list[tuple[str, ...]]:  # hints may now name the template's backends
        return [(r["distribution"], r["kind"], r["backend"], r["status"], r["reason"]) for r in rs]

    others = [r for r in rows if r["distribution"] not in (DIST, "tetrarch-test-broken")]
    assert standing(others) == standing(plugin_rows(Registry())), "the plugins changed how the other backends stand"

    table = _tetrarch("plugins", env=env)
    assert table.returncode == 0, table.stderr
    (line,) = [ln for ln in table.stdout.splitlines() if " threaded " in ln]
    assert line.split()[:5] == [DIST, VERSION, "transport", "threaded", "available"]


@pytest.mark.parametrize("selection", [
    {"TETRARCH_TRANSPORT": "threaded"},
    {"TETRARCH_LISTEN_ADDRESS": "threaded+tcp://127.0.0.1:0"},
], ids=["by-name", "by-scheme"])
def test_an_actor_program_runs_over_it(
    template_site: Path, broken_site: Path, selection: dict[str, str], run_scenario: Callable[..., Any]
) -> None:
    result = run_scenario(SCENARIOS / "third_party_program.py", timeout=90,
                          env=_env(template_site, broken_site, **selection))
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["client"]["transport"] == "threaded"
    assert out["client"]["address"].startswith("tcp://127.0.0.1:")
    assert len(out["procs"]) == 2
    for proc in out["procs"]:
        assert proc["transport"] == "threaded", f"a proc did not get its spawner's transport: {proc}"
        assert proc["address"].startswith("tcp://")
        assert "threaded-reader" in proc["threads"], f"no threaded connection in proc {proc['pid']}: {proc}"
    assert out["echoes"] == ["over the wire"] * 2


def test_the_installed_copy_passes_the_templates_own_tests(template_site: Path, tmp_path: Path) -> None:
    """TransportConformance and the rest, importing the template from the throwaway folder only."""
    copy = tmp_path / "plugin_template"
    shutil.copytree(TEMPLATE, copy, ignore=shutil.ignore_patterns("src", *_LITTER))
    # The template's conftest.py puts its source folder on sys.path; this one insists on the installed copy.
    (copy / "tests" / "conftest.py").write_text(
        "import tetrarch_plugin_template\n"
        f"assert tetrarch_plugin_template.__file__.startswith({str(template_site)!r}), "
        "tetrarch_plugin_template.__file__\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-k", "not preauth", str(copy / "tests")],
        capture_output=True, text=True, timeout=scaled(150), cwd=copy, env=_env(template_site),
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    conformance = [ln for ln in result.stdout.splitlines() if "::TestThreadedTransport::" in ln]
    # optional capabilities the template does not offer (receive sinks) skip; everything else passes
    assert all("PASSED" in ln or "SKIPPED" in ln for ln in conformance), result.stdout[-4000:]
    assert sum("PASSED" in ln for ln in conformance) >= 15, result.stdout[-4000:]
