"""``Allocator.spans_hosts`` is honoured: the client listens where other hosts can reach it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tetrarch.testing import scaled

SCENARIO = Path(__file__).parent / "scenarios" / "spans_hosts.py"
# Pins its transport itself (run once, not per transport).
pytestmark = [pytest.mark.transport_independent, pytest.mark.isolated, pytest.mark.timeout(scaled(60))]


def _run(run_scenario: Callable[..., Any], transport: str) -> dict:
    res = run_scenario(SCENARIO, timeout=50, env={"TETRARCH_TRANSPORT": transport})
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_spanning_allocation_makes_the_client_listen_routably_and_tells_the_agents(run_scenario) -> None:
    out = _run(run_scenario, "tcp")
    assert out["before"].startswith("tcp://127.0.0.1:"), out
    assert out["after"] != out["before"] and out["after"].startswith("tcp://"), out
    assert out["client_addr"] == out["after"], "agents must dial the routable address"
    assert out["spans_hosts"] == "1", "agents and their procs must listen routably too"


def test_a_transport_that_cannot_span_hosts_says_so(run_scenario) -> None:
    out = _run(run_scenario, "ipc")
    assert "cannot span hosts" in out["error"] and "tcp" in out["error"], out
    assert out["after"] == out["before"]
