"""Acceptance: an installed plugin distribution that raises on import.

A throwaway distribution (the ``broken_site`` fixture of tests/plugins/conftest.py) is
pip-installed into a private ``--target`` folder put on ``PYTHONPATH`` (importlib.metadata
finds its dist-info there), so the venv stays clean. ``tetrarch plugins --json`` must
show it BROKEN with its error while every other backend keeps its normal status; strict
mode must refuse to start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tetrarch._cli import plugin_rows
from tetrarch._plugins import Registry
from tetrarch.testing import scaled

# Every test runs ``python -m tetrarch`` (and the fixture runs pip) in a fresh interpreter.
pytestmark = [pytest.mark.isolated, pytest.mark.timeout(scaled(120))]

DIST = "tetrarch-test-broken"
ERROR = "tetrarch-test-broken exploded on import"


def run_plugins(site: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "tetrarch", "plugins", "--json"],
        capture_output=True, text=True, timeout=scaled(30), env={**os.environ, "PYTHONPATH": path, **env},
    )


def test_broken_plugin_is_reported_and_the_rest_still_load(broken_site: Path) -> None:
    result = run_plugins(broken_site)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    broken = [r for r in rows if r["distribution"] == DIST]
    assert len(broken) == 1
    (row,) = broken
    assert row["status"] == "broken"
    assert row["version"] == "9.9.9"
    assert (row["kind"], row["backend"]) == ("plugin", "kaboom")
    assert ERROR in row["reason"] and "RuntimeError" in row["reason"]
    assert "Traceback" in row["traceback"] and ERROR in row["traceback"]
    # every builtin and first-party backend keeps exactly its normal status
    others = [r for r in rows if r["distribution"] != DIST]
    assert others == plugin_rows(Registry())
    dists = {r["distribution"] for r in others}
    assert {"tetrarch", "tetrarch-transport-zmq", "tetrarch-transport-nng", "tetrarch-rdma-verbs",
            "tetrarch-rdma-efa", "tetrarch-alloc-slurm"} <= dists
    assert not [r for r in others if r["status"] in ("broken", "not installed")]


def test_strict_mode_refuses_the_broken_plugin(broken_site: Path) -> None:
    result = run_plugins(broken_site, TETRARCH_PLUGINS_STRICT="1")
    assert result.returncode == 1
    assert "'kaboom'" in result.stderr and DIST in result.stderr and ERROR in result.stderr


def test_disabling_the_broken_plugin_hides_its_error(broken_site: Path) -> None:
    result = run_plugins(broken_site, TETRARCH_DISABLE_PLUGINS="kaboom", TETRARCH_PLUGINS_STRICT="1")
    assert result.returncode == 0, result.stderr
    (row,) = [r for r in json.loads(result.stdout) if r["distribution"] == DIST]
    assert row["status"] == "disabled"
    assert row["reason"] == "disabled by TETRARCH_DISABLE_PLUGINS"
