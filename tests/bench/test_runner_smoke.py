"""The benchmark suite's runner (``python -m benchmarks``) works: one tiny workload, tetrarch only.

Not a measurement: ``--quick --only call,call_async --repeat 1`` in a fresh interpreter, no
idle wait, and the JSON it writes must hold the ``call`` row with a positive tetrarch median
next to its raw baselines from the same run, and the async endpoint's ratio to the plain one.
The benchmarks themselves stay out of ``make test`` (``make bench``).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tetrarch.testing import scaled

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.isolated, pytest.mark.timeout(scaled(45))]


def test_quick_call_rows_have_a_positive_median_their_raw_baseline_and_the_async_ratio(
        run_scenario: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    # `python benchmarks` runs benchmarks/__main__.py, as `python -m benchmarks` does from the root.
    res = run_scenario(REPO / "benchmarks", "--quick", "--only", "call,call_async", "--repeat", "1", "--idle-wait", "0",
                       "--json", str(out), timeout=30, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["machine"]["cpus"] >= 1 and doc["options"]["repeat"] == 1
    row, async_row = doc["rows"]
    assert async_row["workload"] == "call_async"
    assert (row["workload"], row["unit"], row["baseline"]) == ("call", "µs", "raw:zmq")
    for column in ("tetrarch", "raw:zmq", "raw:pipe"):
        cell = row["columns"][column]
        assert "error" not in cell, cell
        assert cell["median"] > 0 and len(cell["samples"]) == 1
    assert row["x_raw"]["tetrarch"]["median"] > 0
    assert "| call" in res.stdout
    ratio = doc["async_x_sync"][f"call_async {async_row['size']}"]["tetrarch"]
    assert ratio["median"] == async_row["columns"]["tetrarch"]["median"] / row["columns"]["tetrarch"]["median"]
    assert f"call_async {async_row['size']} x sync" in res.stdout


def test_telemetry_paired_run_gives_every_mode_a_ratio_to_off(
        run_scenario: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    # Three rounds, so that each third of them (the ratio's range) holds one.
    res = run_scenario(REPO / "benchmarks" / "bench_telemetry.py", "--paired", "--rounds", "3", "--calls", "5",
                       "--pipelined", "20", "--json", timeout=40, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert list(rows) == ["off", "metrics", "tracing 1 %", "tracing 100 %", "off, again"]
    for key in ("p50", "rate", "cpu", "actor_cpu"):
        assert rows["off"][key + "_ratio"] == [1.0, 1.0, 1.0]
        for mode, row in rows.items():
            ratio, low, high = row[key + "_ratio"]
            assert row[key] > 0 and ratio > 0 and 0 < low <= high, (mode, key, row)
    assert "3 rounds in one client and actor switching modes" in res.stdout
