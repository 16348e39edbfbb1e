"""``tetrarch plugins`` and ``python -m tetrarch plugins --json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tetrarch._cli import COLUMNS, main, plugin_rows
from tetrarch._plugins import Registry
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

KEYS = set(COLUMNS) | {"traceback"}


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tetrarch", *args],
        capture_output=True, text=True, timeout=scaled(30), env={**os.environ, **(env or {})},
    )


@pytest.mark.isolated
def test_json_lists_every_backend() -> None:
    result = run_cli("plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert all(set(row) == KEYS for row in rows)
    seen = {(r["kind"], r["backend"]): r for r in rows}
    for key in [("transport", "ipc"), ("transport", "tcp"), ("rdma", "tcp"), ("rdma", "shm")]:
        assert seen[key]["distribution"] == "tetrarch"
    for key in [("transport", "zmq"), ("transport", "nng"), ("rdma", "verbs"), ("rdma", "efa"),
                ("allocator", "local"), ("allocator", "slurm")]:
        assert seen[key]["distribution"].startswith("tetrarch-")
    assert seen[("allocator", "local")]["status"] == "available"
    # the subprocess sees what this process sees
    assert rows == plugin_rows(Registry())


@pytest.mark.isolated
def test_table_has_the_columns() -> None:
    result = run_cli("plugins")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["DISTRIBUTION", "VERSION", "KIND", "BACKEND", "STATUS", "REASON", "/", "HINT"]
    assert any(line.split()[:5] == ["tetrarch-alloc-local", "0.1.0", "allocator", "local", "available"]
               for line in lines[1:])
    assert any(line.split()[2:5] == ["transport", "zmq", "available"] and "pyzmq" in line for line in lines)


@pytest.mark.isolated
def test_disabled_plugin_in_json() -> None:
    result = run_cli("plugins", "--json", env={"TETRARCH_DISABLE_PLUGINS": "tetrarch-alloc-slurm"})
    rows = {(r["kind"], r["backend"]): r for r in json.loads(result.stdout)}
    assert rows[("allocator", "slurm")]["status"] == "disabled"
    assert rows[("allocator", "slurm")]["reason"] == "disabled by TETRARCH_DISABLE_PLUGINS"


def test_main_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    assert isinstance(json.loads(capsys.readouterr().out), list)
    assert main([]) == 2
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert "tetrarch 0.1.0" in capsys.readouterr().out
