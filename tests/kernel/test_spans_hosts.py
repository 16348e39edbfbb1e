"""``Allocator.spans_hosts`` is honoured: the client listens where other hosts can reach it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).parent / "scenarios" / "spans_hosts.py"
pytestmark = [pytest.mark.timeout(60)]


def _run(transport: str) -> dict:
    env = {**os.environ, "TETRARCH_TRANSPORT": transport}
    res = subprocess.run([sys.executable, str(SCENARIO)], env=env, capture_output=True, text=True, timeout=50,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_spanning_allocation_makes_the_client_listen_routably_and_tells_the_agents() -> None:
    out = _run("tcp")
    assert out["before"].startswith("tcp://127.0.0.1:"), out
    assert out["after"] != out["before"] and out["after"].startswith("tcp://"), out
    assert out["client_addr"] == out["after"], "agents must dial the routable address"
    assert out["spans_hosts"] == "1", "agents and their procs must listen routably too"


def test_a_transport_that_cannot_span_hosts_says_so() -> None:
    out = _run("ipc")
    assert "cannot span hosts" in out["error"] and "tcp" in out["error"], out
    assert out["after"] == out["before"]
