"""SQL over a two-host job's telemetry: a SlurmJob on the netns cluster (h1, h2) answers with rows of both hosts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tetrarch.testing import scaled

SCENARIO = Path(__file__).parent / "scenarios" / "slurm_telemetry.py"
pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(150))]
pytest.importorskip("duckdb", reason='SQL over telemetry needs the sql extra: pip install "tetrarch[sql]"')


@pytest.mark.isolated
@pytest.mark.slow
@pytest.mark.parametrize("cluster", ["netns"], indirect=True)  # two hosts of their own names (h1, h2)
def test_a_query_over_a_two_host_job_returns_rows_of_both_hosts(run_scenario: Callable[..., Any], cluster: Any,
                                                                 tmp_path: Path) -> None:
    env = {**cluster.env, "TETRARCH_TELEMETRY_DIR": str(tmp_path / "telemetry"), "TETRARCH_METRICS": "1",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_METRIC_EXPORT_INTERVAL": "200"}
    res = run_scenario(SCENARIO, timeout=120, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    (out,) = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert out["names"] == ["h1", "h2"]
    assert [(r["host"], r["n"]) for r in out["rows"]] == [("h1", 1), ("h2", 1)], out
    assert "mesh.spawned" in out["events"] and "host.ready" in out["events"], out
    print(f"\n[netns] telemetry query over 2 hosts: first {out['first_s'] * 1e3:.0f} ms, "
          f"warm {out['warm_s'] * 1e3:.0f} ms")
