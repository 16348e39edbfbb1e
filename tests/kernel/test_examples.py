"""The examples run as scripts (fresh interpreters) and print what they promise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(90))

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.isolated
@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("quickstart.py", "the actor survived: 0.25"),
        ("work_queue.py", "work_queue: processed 20 items with 4 workers"),
        ("ping_pong.py", "ping_pong: 2 pairs played 10 rounds"),
        ("supervision.py", "supervision: the manager handled 1 failure; the fault hook recorded 1"),
        ("parameter_server.py", "parameter_server: loss went from 0.3439 to 0.0014 over 20 steps"),
    ],
)
def test_example_runs(run_scenario, script: str, expected: str) -> None:
    # ``python examples/<script>``, run from the repository root.
    res = run_scenario(EXAMPLES / script, timeout=60, cwd=EXAMPLES.parent)
    assert res.returncode == 0, f"{script} exited {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert expected in res.stdout, res.stdout
