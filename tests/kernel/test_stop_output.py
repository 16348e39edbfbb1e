"""A stop returns after the procs' last lines were printed, also when their host agent is slow."""

from __future__ import annotations

from pathlib import Path

import pytest

from tetrarch.testing import scaled

pytestmark = [pytest.mark.timeout(scaled(90))]

HERE = Path(__file__).resolve().parent


@pytest.mark.isolated
def test_stop_waits_for_the_lines_and_exit_reports_of_a_slow_host_agent(run_scenario):
    # The procs exit and their connections drop at once; their host agent, stopped for 2 s,
    # forwards their lines and reports their exits only then. A stop that took the dropped
    # connections for the end (after the 0.5 s grace for a report) printed CLIENT DONE first.
    res = run_scenario(HERE / "scenarios" / "proc_output.py", "slow_agent", timeout=60, pythonpath=[HERE])
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert lines[-1] == "CLIENT DONE", lines
    assert sorted(ln for ln in lines if "said before the stop" in ln) == [
        "[trainers gpus=0] said before the stop", "[trainers gpus=1] said before the stop"], lines
