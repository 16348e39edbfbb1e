"""The examples run as scripts (fresh interpreters) and print what they promise."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(90)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# ``python examples/<script>``, through the suite's fresh-interpreter helper (the
# snippet execs the script in place): on a timeout it dumps the stacks and kills the
# script's whole process group.
_RUN_SCRIPT = """
import os, sys
os.execv(sys.executable, [sys.executable, sys.argv[1]])
"""


@pytest.mark.isolated
@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("quickstart.py", "the actor survived: 0.25"),
        ("work_queue.py", "work_queue: processed 20 items with 4 workers"),
        ("ping_pong.py", "ping_pong: 2 pairs played 10 rounds"),
        ("supervision.py", "supervision: the manager handled 1 failure; the fault hook recorded 1"),
    ],
)
def test_example_runs(run_isolated, script: str, expected: str) -> None:
    res = run_isolated(_RUN_SCRIPT, 60, args=(str(EXAMPLES / script),), cwd=EXAMPLES.parent)
    assert res.returncode == 0, f"{script} exited {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert expected in res.stdout, res.stdout
