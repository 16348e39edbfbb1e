"""Every process tetrarch runs raises its soft open-file limit to the hard one (issue 28, item 5).

Many Linux machines start processes with a soft limit of 1024; a process with many peers, or a
flood of strangers' connections, needs more, and each transport's connection cap is half of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tetrarch.testing import scaled

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(90))]

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "open_file_limit.py"


@pytest.mark.isolated
def test_client_host_agent_and_procs_run_with_the_hard_open_file_limit(run_scenario) -> None:
    res = run_scenario(SCENARIO, timeout=60)
    assert res.returncode == 0, res.stderr[-3000:]
    got = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
    hard = got["hard"]
    if hard in ("1024", "-1"):
        pytest.skip(f"the hard open-file limit here is {hard}: nothing to raise")
    assert got["client"] == hard, got
    assert got["procs"].split() == [hard, hard], got
    assert got["agent"] == hard, got
