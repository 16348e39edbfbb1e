"""``tetrarch config [--json]``, and no BrokenPipeError traceback when the reader goes away."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tetrarch._cli import CONFIG_KEYS, config_rows, main
from tetrarch._config import SETTINGS, TEST_SETTINGS, configure, known_settings
from tetrarch._config_plugins import settings_by_owner

pytestmark = pytest.mark.timeout(60)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tetrarch", *args],
        capture_output=True, text=True, timeout=30, env={**os.environ, **(env or {})},
    )


def test_table_shows_value_source_and_meaning() -> None:
    result = run_cli("config", env={"TETRARCH_STOP_TIMEOUT": "3", "TETRARCH_DISABLE_PLUGINS": "a,b"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["KEY", "VARIABLE", "VALUE", "SOURCE", "MEANING"]
    rows = {line.split()[0]: line for line in lines[1:] if line and not line.endswith(":")}
    assert set(rows) == set(known_settings())  # core's, the installed plugins' and the test suite's
    assert lines[len(SETTINGS) + 1:len(SETTINGS) + 3] == ["", f"plugin {sorted(settings_by_owner())[0]}:"]
    assert "tetrarch's own test suite (not for production):" in lines
    assert rows["stop_timeout"].split()[:4] == ["stop_timeout", "TETRARCH_STOP_TIMEOUT", "3.0", "environment"]
    assert rows["stop_timeout"].endswith(SETTINGS["stop_timeout"].doc)
    assert rows["disable_plugins"].split()[2:4] == ["a,b", "environment"]
    assert rows["transport"].split()[2:4] == ["(auto)", "default"]
    assert rows["rdma_fallback"].split()[2:4] == ["true", "default"]


def test_json_rows() -> None:
    result = run_cli("config", "--json", env={"TETRARCH_RDMA_FALLBACK": "off", "TETRARCH_ALLOCATOR": "local"})
    assert result.returncode == 0, result.stderr
    rows = {r["key"]: r for r in json.loads(result.stdout)}
    plugins = [s.key for _, settings in sorted(settings_by_owner().items()) for s in settings]
    assert list(rows) == [*SETTINGS, *plugins, *TEST_SETTINGS]
    assert all(list(r) == list(CONFIG_KEYS) for r in rows.values())
    assert rows["rdma_fallback"] | {"doc": ""} == {
        "key": "rdma_fallback", "env": "TETRARCH_RDMA_FALLBACK", "value": False, "source": "environment", "doc": "",
        "type": "a boolean (1/0, true/false, yes/no, on/off)", "default": True, "propagate": True, "error": "",
        "owner": "tetrarch",
    }
    assert rows["test_slowdown"]["owner"] == "tetrarch-test-suite"
    assert (rows["allocator"]["value"], rows["allocator"]["default"]) == ("local", None)
    assert (rows["disable_plugins"]["value"], rows["stop_timeout"]["value"]) == ([], 10.0)


def test_values_set_from_code_show_as_code(capsys: pytest.CaptureFixture[str]) -> None:
    configure(heartbeat_interval=0.25, disable_plugins=["x"])
    assert main(["config", "--json"]) == 0
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
    assert (rows["heartbeat_interval"]["value"], rows["heartbeat_interval"]["source"]) == (0.25, "code")
    assert rows["disable_plugins"]["value"] == ["x"]
    assert main(["config"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("heartbeat_interval"))
    assert line.split()[2:4] == ["0.25", "code"]
    assert {r["key"]: r for r in config_rows()} == rows


def test_an_invalid_variable_is_shown_and_fails_the_command() -> None:
    result = run_cli("config", "--json", env={"TETRARCH_CONNECT_TIMEOUT": "soon"})
    assert result.returncode == 1
    row = next(r for r in json.loads(result.stdout) if r["key"] == "connect_timeout")
    assert (row["value"], row["source"]) == ("soon", "environment")
    assert row["error"] == ("environment variable TETRARCH_CONNECT_TIMEOUT='soon' must be a number of seconds "
                            "(or a duration such as '30s', '1m 30s' or '500ms')")
    assert "tetrarch: environment variable TETRARCH_CONNECT_TIMEOUT='soon'" in result.stderr
    table = run_cli("config", env={"TETRARCH_CONNECT_TIMEOUT": "soon"})
    assert table.returncode == 1 and "soon (invalid)" in table.stdout


def test_plugins_reports_an_invalid_plugin_setting_without_a_traceback() -> None:
    result = run_cli("plugins", env={"TETRARCH_PLUGINS_STRICT": "maybe"})
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "tetrarch: environment variable TETRARCH_PLUGINS_STRICT='maybe' must be a boolean "
        "(1/0, true/false, yes/no, on/off)"
    )


@pytest.mark.parametrize("command", ["config", "plugins"])
def test_a_reader_that_goes_away_gets_no_traceback(command: str) -> None:
    """``tetrarch config --json | head -1``: the reader is gone before the first write (EPIPE)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tetrarch", command, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=30) == 1
    assert stderr == ""


def test_head_in_a_shell_pipeline_prints_one_line_and_no_error() -> None:
    result = subprocess.run(
        f"{sys.executable} -m tetrarch config --json | head -1; {sys.executable} -m tetrarch plugins --json | head -1",
        shell=True, capture_output=True, text=True, timeout=60,
    )
    assert result.stdout == "[\n[\n"
    assert result.stderr == ""
