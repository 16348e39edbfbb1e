"""End to end: a third-party allocator gives host meshes through the public job API.

The template's ``sandbox`` allocator (installed from ``examples/plugin_template`` into a
throwaway folder, ``template_site`` in tests/plugins/conftest.py, so the registry finds
it as an installed distribution) starts core's real host agent twice, each in a scratch
folder of its own, with the secret by file. A fresh client gets the hosts from
``tetrarch.job.AllocatorJob({"hosts": 2}, allocator="sandbox")`` (docs/jobs.md), spawns
a proc per host and calls an actor in each; ``kill()`` leaves no process and no
scratch folder behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tetrarch.testing import scaled, still_running

pytestmark = [pytest.mark.isolated, pytest.mark.timeout(scaled(120))]

SCENARIO = Path(__file__).parent / "scenarios" / "sandbox_job.py"


def test_a_job_on_the_sandbox_allocator_calls_actors_and_kill_leaves_nothing(
    template_site: Path, run_scenario: Callable[..., Any]
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TETRARCH_ALLOCATOR"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(template_site), env.get("PYTHONPATH", "")) if p)
    result = run_scenario(SCENARIO, timeout=90, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["echoes"] == ["from a sandbox"] * 2
    agents = out["agents"]
    assert len({a["pid"] for a in agents}) == 2, "one host agent per host"
    folders = [Path(a["cwd"]) for a in agents]
    assert all(f.name.startswith("host") and f.parent.name.startswith("tetrarch-sandbox-") for f in folders), folders
    assert out["left"] == [], "kill() returned with processes of the job still running"
    assert still_running(out["procs"] + [a["pid"] for a in agents], scaled(10)) == []
    assert not [f for f in folders if f.parent.exists()], "kill() left the sandbox's scratch folders"
