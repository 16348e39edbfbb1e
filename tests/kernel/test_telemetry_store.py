"""SQL over a job's telemetry (docs/telemetry.md, "SQL over a job's telemetry").

Each host agent keeps a bounded, rotating store of its procs' rows; the client keeps its own;
``job.telemetry.query`` and ``tetrarch query`` answer over all of them. Checked here: the
store's bounds in memory and on disk, a recorder's bound under a flood, a bad query's error,
the events of a run (meshes spawned and stopped, a failure cascade with its root cause), spans
and metric points of a job, ``tetrarch query`` against a running program and a finished job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kernel_actors import Counter
from tetrarch import this_host
from tetrarch._errors import TelemetryQueryError
from tetrarch._telemetry._forward import Recorder
from tetrarch._telemetry._query import run_sql
from tetrarch._telemetry._store import TelemetryStore, read_folder
from tetrarch._telemetry._tables import event_rows
from tetrarch.testing import scaled

pytest.importorskip("duckdb", reason='SQL over telemetry needs the sql extra: pip install "tetrarch[sql]"')

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(120))]

HERE = Path(__file__).parent


def _event(i: int) -> dict[str, Any]:
    return {"event": "mesh.spawned", "time": float(i), "pid": 1, "mesh": f"m{i}", "key": f"k{i}", "actors": 1,
            "owner": "client", "class": "x.Y"}


@pytest.mark.transport_independent  # pure: no process
def test_the_store_rotates_to_disk_and_keeps_both_bounds(tmp_path: Path) -> None:
    store = TelemetryStore(tmp_path / "host", rows=200, disk_mb=0.1)
    for start in range(0, 20_000, 500):
        store.add("events", [event_rows(_event(i))[0][1] for i in range(start, start + 500)])
        assert store.counts()["events"] <= 200
        assert store.disk_usage() <= 0.1 * (1 << 20)
    assert store.rotated > 0 and store.deleted_files > 0  # it rotated, and the disk bound deleted files
    got = run_sql("SELECT count(*) AS n, max(time) AS newest, min(time) AS oldest FROM events", [store.tables()])
    row = got.to_pylist()[0]
    assert row["newest"] == 19_999.0 and row["oldest"] > 0 and 200 <= row["n"] < 20_000, row
    store.flush()  # the end of a job: memory's rows on disk, readable as a finished job's folder
    assert store.counts()["events"] == 0
    assert run_sql("SELECT max(time) AS t FROM events", [read_folder(tmp_path)]).to_pylist() == [{"t": 19_999.0}]


@pytest.mark.transport_independent  # pure: no process
def test_a_recorder_under_a_flood_drops_its_oldest_rows_and_counts_them() -> None:
    got: list[dict[str, list[tuple]]] = []
    rec = Recorder(got.append, max_pending=1_000, flush_s=3600)
    rec._thread = object()  # type: ignore[assignment] # no flusher thread: the flood outruns the sink
    for i in range(50_000):
        rec.event(_event(i))
    assert len(rec._rows) == 1_000 and rec.dropped == 49_000
    rec.flush()
    times = [row[0] for batch in got for row in batch["events"]]
    assert times == [float(i) for i in range(49_000, 50_000)]  # the newest, in order
    assert max(len(batch["events"]) for batch in got) == 512  # sent in messages of at most 512 rows


@pytest.mark.transport_independent  # pure: no process
def test_with_the_store_off_nothing_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    from tetrarch import _events
    from tetrarch._runtime.services._telemetry import start_telemetry

    monkeypatch.setenv("TETRARCH_TELEMETRY_STORE", "0")
    before = list(_events.LISTENERS)
    assert start_telemetry("client", None, None) is None  # type: ignore[arg-type] # no router needed
    assert before == _events.LISTENERS


@pytest.mark.transport_independent  # pure: no process
def test_a_telemetry_folder_keeps_the_newest_runs(tmp_path: Path) -> None:
    from tetrarch._runtime.services._telemetry import prune_runs

    for i in range(25):
        run = tmp_path / f"20260101T0000{i:02d}-node-{100 + i}"
        (run / "node-client-1").mkdir(parents=True)
        os.utime(run, (1_000_000 + i, 1_000_000 + i))
    (tmp_path / "mine").mkdir()  # not a run's folder: never touched
    gone = prune_runs(str(tmp_path), keep=20)
    assert sorted(Path(g).name[-3:] for g in gone) == ["100", "101", "102", "103", "104"]
    assert len(list(tmp_path.iterdir())) == 21 and (tmp_path / "mine").is_dir()


@pytest.mark.transport_independent  # pure: no process
def test_a_bad_query_raises_the_engines_error() -> None:
    with pytest.raises(TelemetryQueryError, match="syntax error"):
        run_sql("SELEC * FROM events", [{}])
    with pytest.raises(TelemetryQueryError, match="no_such_table"):
        run_sql("SELECT * FROM no_such_table", [{}])
    with pytest.raises(TelemetryQueryError, match="needs an SQL statement"):
        run_sql("  ", [{}])


def test_a_query_reads_and_writes_no_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    out = tmp_path / "out.csv"
    for sql in (f"SELECT * FROM read_csv('{secret}')", f"COPY (SELECT 1) TO '{out}'", f"ATTACH '{tmp_path / 'x.db'}'",
                "INSTALL httpfs"):
        with pytest.raises(TelemetryQueryError, match="disabled"):
            run_sql(sql, [{}])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.csv"]


def _poll(sql: str, until: Any, bound: float = 30.0) -> list[dict[str, Any]]:
    from tetrarch._runtime.meshes._telemetry import telemetry

    deadline = time.monotonic() + scaled(bound)
    while True:
        rows = telemetry().query(sql).to_pylist()
        if until(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)  # procs hand their rows over once a second: poll for them


def test_a_runs_meshes_are_queryable_while_it_runs() -> None:
    pm = this_host().spawn_procs(per_host={"gpus": 2}, name="tq_procs")
    mesh = pm.spawn("tq_counters", Counter, 0)
    mesh.initialized.get(timeout=scaled(30))
    rows = _poll("SELECT name, actors, state FROM meshes WHERE name = 'tq_counters'", bool)
    assert rows == [{"name": "tq_counters", "actors": 2, "state": "running"}]
    actors = _poll("SELECT rank, state FROM actors WHERE mesh = 'tq_counters' ORDER BY rank", bool)
    assert actors == [{"rank": 0, "state": "running"}, {"rank": 1, "state": "running"}]
    type(mesh).stop(mesh).get(timeout=scaled(30))
    rows = _poll("SELECT state FROM meshes WHERE name = 'tq_counters'", lambda r: r and r[0]["state"] == "stopped")
    assert rows == [{"state": "stopped"}]
    pm.stop().get(timeout=scaled(60))


def _tetrarch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tetrarch", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=scaled(60))


def test_tetrarch_query_against_a_running_program(tmp_path: Path) -> None:
    pytest.importorskip("starlette", reason='the admin server needs starlette: pip install "tetrarch[admin]"')
    import tetrarch.admin as admin

    pm = this_host().spawn_procs(per_host={"gpus": 1}, name="tq_cli")
    mesh = pm.spawn("tq_cli_mesh", Counter, 0)
    mesh.initialized.get(timeout=scaled(30))
    env = {"TETRARCH_ADMIN_DIR": str(tmp_path)}
    os.environ["TETRARCH_ADMIN_DIR"] = str(tmp_path)
    server = admin.serve()
    try:
        res = _tetrarch("query", "--json", "SELECT name, state FROM meshes WHERE name = 'tq_cli_mesh'", env=env)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["columns"] == ["name", "state"] and out["rows"] == [["tq_cli_mesh", "running"]], out
        assert out["missing"] == []
        res = _tetrarch("query", "SELECT nope FROM meshes", env=env)
        assert res.returncode == 1 and "Binder Error" in res.stderr and "nope" in res.stderr, res.stderr
        res = _tetrarch("query", "SELECT name FROM meshes WHERE name = 'tq_cli_mesh'", env=env)
        assert res.stdout.split() == ["name", "tq_cli_mesh"], res.stdout
    finally:
        server.stop()
        del os.environ["TETRARCH_ADMIN_DIR"]
        type(mesh).stop(mesh).get(timeout=scaled(30))
        pm.stop().get(timeout=scaled(60))


@pytest.mark.isolated
def test_a_finished_jobs_failure_cascade_from_its_folder(run_scenario: Any, tmp_path: Path) -> None:
    """The cascade of events_cascade.py: its root cause, recorded in the owner's proc, comes from the
    host agent's files; the failure it caused, recorded in the client, from the client's."""
    env = {"TETRARCH_TELEMETRY_DIR": str(tmp_path)}
    res = run_scenario(HERE / "scenarios" / "events_cascade.py", timeout=120, env=env, pythonpath=[str(HERE)])
    assert res.returncode == 0 and "DONE sup_pass" in res.stdout, res.stderr[-3000:]
    sql = ("SELECT mesh, root_cause, root_mesh, endpoint, pid FROM actor_status_events "
           "WHERE root_mesh = 'fragile' ORDER BY time")
    res = _tetrarch("query", "--json", "--dir", str(tmp_path), sql, env={})
    assert res.returncode == 0, res.stderr
    rows = [dict(zip(json.loads(res.stdout)["columns"], r, strict=True)) for r in json.loads(res.stdout)["rows"]]
    assert [(r["mesh"], r["root_cause"], r["endpoint"]) for r in rows] == [
        ("fragile", True, "raise_exc"), ("sup_pass", False, "__supervise__")], rows
    assert rows[0]["pid"] != rows[1]["pid"]
    (run,) = [p.name for p in tmp_path.iterdir()]
    res = _tetrarch("query", "--csv", "--dir", str(tmp_path), "--job", run, "SELECT count(*) AS n FROM meshes", env={})
    assert res.returncode == 0 and res.stdout.split() == ["n", "2"], res.stdout + res.stderr


@pytest.mark.isolated
def test_a_jobs_spans_messages_and_metric_points(run_scenario: Any, tmp_path: Path) -> None:
    env = {"TETRARCH_TELEMETRY_DIR": str(tmp_path), "TETRARCH_METRICS": "1",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_METRIC_EXPORT_INTERVAL": "200"}
    res = run_scenario(HERE / "scenarios" / "telemetry_job.py", timeout=120, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    out = {k: v for line in res.stdout.splitlines() if line.startswith("{") for k, v in json.loads(line).items()}
    assert out["messages"] == [{"sender_pid": out["client"], "receiver_pid": out["actor"], "endpoint": "receive"}]
    assert {"name": "tetrarch.actor.calls", "pid": out["actor"]} in out["points"]
    assert out["bad"] == "TelemetryQueryError" and "syntax error" in out["message"]
    # a stopped host agent: the others answer within the bound, and the query names the missing one
    assert len(out["missing"]) == 1 and out["missing"][0].startswith(out["spare"]), out
    assert out["rows"][0]["n"] > 0 and out["took_s"] < scaled(10), out
    assert any("no rows from 1 host" in w for w in out["warned"]), out


@pytest.mark.isolated
@pytest.mark.slow
def test_a_flood_of_spans_keeps_the_stores_within_their_bounds(run_scenario: Any, tmp_path: Path) -> None:
    """A short flood (the 10-minute soak is the long variant): 2 procs x 10 rounds x 40 000 spans into a
    store of 2 000 rows and 1 MB: the host's files reach the bound and never pass it, its memory stops
    growing, and the procs and the agent drop what they cannot keep."""
    env = {"TETRARCH_TELEMETRY_DIR": str(tmp_path), "TETRARCH_TELEMETRY_ROWS": "2000",
           "TETRARCH_TELEMETRY_DISK_MB": "1"}
    res = run_scenario(HERE / "scenarios" / "telemetry_flood.py", "40000", "10", timeout=240, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    rounds = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")][1:]
    assert len(rounds) == 10, res.stdout
    assert all(r["rows"] > 0 and r["disk"] <= 1 << 20 for r in rounds), rounds
    assert max(r["disk"] for r in rounds) > 1 << 19, rounds  # the bound was reached: files were deleted
    early = max(r["agent_rss"] for r in rounds[:3])
    assert rounds[-1]["agent_rss"] < early * 1.5, rounds  # bounded, not growing per round
    assert len(list(tmp_path.iterdir())) == 1


#: Seconds of the soak (STRESS_TESTS in tests/conftest.py: make test-stress).
SOAK_S = 600


@pytest.mark.isolated
@pytest.mark.slow
@pytest.mark.timeout(scaled(SOAK_S + 300))
def test_telemetry_stores_stay_within_their_bounds_in_a_soak(run_scenario: Any, tmp_path: Path) -> None:
    """The flood above for 10 minutes: after every round the host's files are within 1 MB, and its
    memory at the end is within 1.5 times what it was after the first rounds."""
    env = {"TETRARCH_TELEMETRY_DIR": str(tmp_path), "TETRARCH_TELEMETRY_ROWS": "2000",
           "TETRARCH_TELEMETRY_DISK_MB": "1"}
    res = run_scenario(HERE / "scenarios" / "telemetry_flood.py", "20000", f"{SOAK_S}s", timeout=SOAK_S + 240,
                       env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    rounds = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")][1:]
    assert len(rounds) >= 3, res.stdout
    assert all(r["disk"] <= 1 << 20 for r in rounds), [r for r in rounds if r["disk"] > 1 << 20]
    early = max(r["agent_rss"] for r in rounds[:3])
    assert rounds[-1]["agent_rss"] < early * 1.5, (early, rounds[-1])
