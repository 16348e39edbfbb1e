"""Owners killed or stopped in the middle of efa transfers (``failure_cases.py``), each class
in a fresh pytest process.

Killing a process inside libfabric 1.17's ``shm`` provider can wreck the provider's state in
the processes that talked to it (a spin lock left held, see ``_endpoint``). Twice in the full
suite the test process itself then ended at once with status 1 and nothing on record, during
the shm kill case, and never in 30 runs of the case alone. In a process of its own such an
ending fails this one test with everything the process printed (``-s``: no capture), and the
rest of the suite goes on. The user-facing rules the cases pin down are the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tetrarch.testing import scaled

HERE = Path(__file__).resolve().parent
CASES = HERE / "failure_cases.py"


@pytest.mark.timeout(scaled(300))
@pytest.mark.parametrize("case", ["TestEfaShmFailures", "TestEfaTcpRxmFailures", "TestStuckShmEndpoint"])
def test_failure_cases_in_a_fresh_process(case: str) -> None:
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", f"{CASES}::{case}", "-s", "-p", "no:cacheprovider"],
            capture_output=True, text=True, timeout=scaled(280), env=env, cwd=HERE.parents[2], check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{case} did not finish within {exc.timeout} s:\n{_tail(exc.stdout)}\n{_tail(exc.stderr)}")
    assert done.returncode == 0, (f"{case} exited {done.returncode}\n--- stdout ---\n{_tail(done.stdout)}\n"
                                  f"--- stderr ---\n{_tail(done.stderr)}")
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if " passed" not in last:
        pytest.skip(f"{case}: {_tail(done.stdout, 1500)}")  # the provider is missing here (the cases say which)


def _tail(text: object, limit: int = 6000) -> str:
    text = text.decode(errors="replace") if isinstance(text, bytes) else str(text or "")
    return text if len(text) <= limit else "...\n" + text[-limit:]
