"""The benchmark suite's runner (``python -m benchmarks``) works: one tiny workload, tetrarch only.

Not a measurement: ``--quick --only call --repeat 1`` in a fresh interpreter, no idle
wait, and the JSON it writes must hold the ``call`` row with a positive tetrarch median
next to its raw baselines from the same run. The benchmarks themselves stay out of
``make test`` (``make bench``).
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


def test_quick_call_row_has_a_positive_median_and_its_raw_baseline(
        run_scenario: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    # `python benchmarks` runs benchmarks/__main__.py, as `python -m benchmarks` does from the root.
    res = run_scenario(REPO / "benchmarks", "--quick", "--only", "call", "--repeat", "1", "--idle-wait", "0",
                       "--json", str(out), timeout=30, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["machine"]["cpus"] >= 1 and doc["options"]["repeat"] == 1
    (row,) = doc["rows"]
    assert (row["workload"], row["unit"], row["baseline"]) == ("call", "µs", "raw:zmq")
    for column in ("tetrarch", "raw:zmq", "raw:pipe"):
        cell = row["columns"][column]
        assert "error" not in cell, cell
        assert cell["median"] > 0 and len(cell["samples"]) == 1
    assert row["x_raw"]["tetrarch"]["median"] > 0
    assert "| call" in res.stdout
