"""The Slurm allocator against a real local Slurm cluster, in both layouts (plain and --netns)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tetrarch.plugins.allocator import HOST_AGENT_MODULE
from tetrarch.testing import scaled

SCENARIO = Path(__file__).parent / "scenarios" / "slurm_mesh.py"
FAKE_HOSTS = Path(__file__).resolve().parents[3] / "scripts" / "fake-hosts"
#: Seconds of the cut test: heartbeats five times a second, a silent host is unreachable after 3 s.
HOST_S = 3.0
HEARTBEAT_S = 0.2
#: Nominal seconds past host_timeout a silent cut may take to fail a call (a watchdog tick, the reply).
CUT_SLACK_S = 3.0
pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(120))]


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _wait_job_ended(cluster: Any, jobid: str, seconds: float) -> str:
    deadline = time.monotonic() + scaled(seconds)
    while cluster.squeue(jobid) and time.monotonic() < deadline:
        time.sleep(0.2)  # polling Slurm's queue: it offers nothing to wait on
    return cluster.squeue(jobid)


def _job_processes(jobid: str) -> list[psutil.Process]:
    """Live processes of the Slurm job ``jobid`` (its steps' tasks and what they started)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SLURM_JOB_ID") == jobid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _assert_job_gone(cluster: Any, jobid: str) -> None:
    """The job leaves the queue, ends in Slurm's record, and no process of it remains (bounded waits)."""
    assert _wait_job_ended(cluster, jobid, 30) == "", cluster.job_state(jobid)
    assert cluster.job_state(jobid) in ("COMPLETED", "CANCELLED", "FAILED", "NODE_FAIL", "GONE")
    deadline = time.monotonic() + scaled(10)
    while (left := _job_processes(jobid)) and time.monotonic() < deadline:
        time.sleep(0.2)  # the job's processes exit on their own once it ended: nothing to wait on
    assert left == [], [(p.pid, p.cmdline()) for p in left]


def _files_holding(root: Path, needle: bytes) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_socket() and needle in path.read_bytes():
                hits.append(str(path))
        except OSError:
            continue
    return hits


@pytest.mark.isolated
@pytest.mark.slow
def test_two_nodes_by_two_procs_output_supervision_and_teardown(run_scenario: Callable[..., Any], cluster: Any,
                                                                tmp_path: Path) -> None:
    env = {**cluster.env, "TETRARCH_SECRET_DIR_UNUSED": ""}
    res = run_scenario(SCENARIO, "basic", timeout=90, env=env, cwd=tmp_path)
    out = _lines(res.stdout)
    assert res.returncode == 0, res.stdout + res.stderr
    head = out[0]
    jobid, secret = head["jobid"], head["secret"]
    values = out[1]["values"]
    assert len(values) == 4
    ranks = sorted((v["rank"]["hosts"], v["rank"]["procs"]) for _p, v in values)
    assert ranks == [(0, 0), (0, 1), (1, 0), (1, 1)]
    nodes = {v["rank"]["hosts"]: v["node"] for _p, v in values}
    assert len(set(nodes.values())) == 2, nodes
    if cluster.layout == "netns":
        assert {v["hostname"] for _p, v in values} == {"h1", "h2"}
    # remote prints reach the client's terminal, prefixed with mesh and rank
    printed = [line for line in (res.stdout + res.stderr).splitlines() if "hello from node" in line]
    assert len(printed) == 4 and all(line != line.lstrip("[") or "hosts=" in line for line in printed), printed
    assert all("hosts=" in line and "procs=" in line for line in printed), printed
    # a killed host agent: the pending call fails with SupervisionError within 2 s; node 1 keeps working
    kill = out[2]
    assert kill["kill"] == "SupervisionError", kill
    print(f"\n[{cluster.layout}] killed host agent: SupervisionError after {kill['kill_s']:.3f} s")
    assert kill["kill_s"] < scaled(2.0), kill
    assert out[3]["survivors"] == 2
    # the job ended with the client; the secret is nowhere in Slurm's files or the job's output
    assert _wait_job_ended(cluster, jobid, 30) == ""
    assert cluster.job_state(jobid) in ("COMPLETED", "CANCELLED", "FAILED", "GONE")
    output = Path.home() / ".cache" / "tetrarch" / "slurm" / f"slurm-{jobid}.out"
    assert "hello from node" not in (output.read_text() if output.exists() else "")
    assert _files_holding(cluster.dir, secret.encode()) == []
    assert _files_holding(output.parent, secret.encode()) == []


@pytest.mark.isolated
@pytest.mark.slow
def test_sigkill_of_the_client_ends_the_job(start_scenario: Callable[..., Any], cluster: Any) -> None:
    proc = start_scenario(SCENARIO, "hold", env=cluster.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    jobid = json.loads(first)["jobid"]
    proc.stdout.readline()  # the values: the procs are up
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=scaled(10))
    # the agents lose the client's connection and end, their srun step and the job with them
    assert _wait_job_ended(cluster, jobid, 40) == "", cluster.job_state(jobid)


@pytest.mark.slow
def test_a_job_pending_past_its_start_timeout_is_cancelled_with_slurms_reason(cluster: Any) -> None:
    if cluster.layout != "plain":
        pytest.skip("one layout is enough: no host agent starts")
    code = (
        "import sys\n"
        "from tetrarch import configure\n"
        "from tetrarch_alloc_slurm import SlurmJob\n"
        "configure(transport='tcp')\n"
        "job = SlurmJob({'w': 1}, job_start_timeout=1, slurm_args=['--begin=now+1hour'])\n"
        "try:\n"
        "    job.state()\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], env={**os.environ, **cluster.env}, capture_output=True,
                         text=True, timeout=scaled(60), check=False)
    assert "AllocatorError" in res.stdout and "BeginTime" in res.stdout and "cancelled" in res.stdout, \
        res.stdout + res.stderr
    jobid = res.stdout.split("Slurm job ")[1].split()[0]
    assert _wait_job_ended(cluster, jobid, 30) == ""


def test_plan_shows_sbatch_and_srun_without_submitting_or_the_secret() -> None:
    from tetrarch_alloc_slurm import SlurmJob

    job = SlurmJob({"trainers": 2}, partition="gpu", time_limit="1:00:00", gpus_per_node=4, cpus_per_task=8,
                   mem="16G", account="acct", qos="high", slurm_args=["--exclusive"], python_exe="/opt/py/bin/python",
                   workdir="/shared/run")
    plan = job.plan()["trainers"]
    for directive in ("--nodes=2", "--ntasks-per-node=1", "--partition=gpu", "--time=1:00:00",
                      "--gpus-per-node=4", "--cpus-per-task=8", "--mem=16G", "--account=acct", "--qos=high",
                      "--exclusive", "--chdir=/shared/run"):
        assert f"#SBATCH {directive}\n" in plan.script, directive
    assert plan.srun_argv[0] == "srun" and "--ntasks=2" in plan.srun_argv
    assert "/opt/py/bin/python" in plan.srun_argv[-1] and HOST_AGENT_MODULE in plan.srun_argv[-1]
    assert plan.script.rstrip().endswith(plan.srun_argv[-1].replace("'", "'\"'\"'")) or "exec srun" in plan.script
    assert not job.running


def test_bad_options_name_the_option() -> None:
    from tetrarch import ArgumentError
    from tetrarch_alloc_slurm import SlurmJob

    with pytest.raises(ArgumentError, match="gpus_per_node"):
        SlurmJob({"w": 1}, gpus_per_node=0)
    with pytest.raises(ArgumentError, match="job_start_timeout"):
        SlurmJob({"w": 1}, job_start_timeout=-1)


@pytest.mark.isolated
@pytest.mark.slow
def test_the_slurm_hello_example_prints_four_ranks_on_two_nodes(run_scenario: Callable[..., Any], cluster: Any) -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "slurm_hello.py"
    res = run_scenario(example, "--timing", timeout=90, env=cluster.env)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [line for line in res.stdout.splitlines() if "'node':" in line and "hosts" in line]
    assert len(rows) == 4, res.stdout
    assert "state() -> 4 actors answering" in res.stdout


def test_probe_says_why_and_how_when_the_controller_does_not_answer(cluster: Any, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if cluster.layout != "plain":
        pytest.skip("one layout is enough")
    from tetrarch_alloc_slurm._plugin import probe

    conf = (cluster.dir / "slurm.conf").read_text()
    dead = tmp_path / "slurm.conf"
    dead.write_text(conf.replace("SlurmctldPort=17817", "SlurmctldPort=17999"))
    monkeypatch.setenv("SLURM_CONF", str(dead))
    start = time.monotonic()
    result = probe()
    took = time.monotonic() - start
    assert not result.ok
    assert "controller" in result.reason and "SLURM_CONF" in result.remedy and "local-slurm start" in result.remedy
    assert took < scaled(2.0)
    monkeypatch.setenv("SLURM_CONF", str(cluster.dir / "slurm.conf"))
    assert probe().ok, probe().reason


def test_probe_without_a_configuration_says_so_and_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SLURM_CONF and no default file: the tools would ask DNS for the controller; the probe
    says no at once (this_host() probes every allocator), naming SLURM_CONF."""
    import subprocess

    from tetrarch_alloc_slurm import _plugin

    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(_plugin, "DEFAULT_CONFS", ("/nonexistent/slurm.conf",))

    def no_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"the probe ran {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "run", no_run)
    result = _plugin.probe()
    assert not result.ok
    if "not on PATH" not in result.reason:  # the Slurm tools are installed (make test installs them)
        assert "no Slurm configuration" in result.reason and "SLURM_CONF" in result.remedy


@pytest.mark.isolated
@pytest.mark.slow
def test_a_cut_node_fails_pending_calls_within_the_heartbeat_bound(run_scenario: Callable[..., Any], cluster: Any,
                                                                  tmp_path: Path) -> None:
    """``fake-hosts cut``: no connection closes; the silence past host_timeout fails the call."""
    if cluster.layout != "netns":
        pytest.skip("a network cut needs a node with its own network (--netns)")
    try:
        res = run_scenario(SCENARIO, "cut", str(HOST_S), str(HEARTBEAT_S), timeout=120, env=cluster.env,
                           cwd=tmp_path)
    finally:  # the scenario heals its cut; if it was killed first, no later test may find a node cut off
        for node in ("h1", "h2"):
            subprocess.run([str(FAKE_HOSTS), "heal", node], capture_output=True, timeout=10, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    out = _lines(res.stdout)
    jobid, cut, survivors = out[0]["jobid"], out[2], out[3]
    assert cut["kill"] == "SupervisionError", cut
    print(f"\n[{cluster.layout}] silent cut: SupervisionError after {cut['kill_s']:.2f} s (host_timeout={HOST_S:g})")
    assert "unreachable" in cut["why"], cut
    # silence began at the last ping; one watchdog tick, the declaration and the reply are the slack
    assert HOST_S - HEARTBEAT_S <= cut["kill_s"] < scaled(HOST_S + CUT_SLACK_S), cut
    assert survivors["survivors"] == 2
    _assert_job_gone(cluster, jobid)


@pytest.mark.isolated
@pytest.mark.slow
def test_a_dead_node_fails_pending_calls_within_two_seconds(run_scenario: Callable[..., Any], cluster: Any,
                                                            tmp_path: Path) -> None:
    """The node's slurmd and its step's processes SIGKILLed at once: the other node keeps answering."""
    res = run_scenario(SCENARIO, "node", timeout=120, env=cluster.env, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    out = _lines(res.stdout)
    jobid, killed, dead, survivors = out[0]["jobid"], out[2], out[3], out[4]
    assert killed["killed"] >= 3, killed  # slurmd, slurmstepd, the host agent (and its procs)
    assert dead["kill"] == "SupervisionError", dead
    print(f"\n[{cluster.layout}] dead node: SupervisionError after {dead['kill_s']:.3f} s")
    assert dead["kill_s"] < scaled(2.0), dead
    assert survivors["survivors"] == 2
    _assert_job_gone(cluster, jobid)


def _job_ids(cluster: Any) -> list[int]:
    """Every job the controller knows (ended ones stay listed for MinJobAge, 300 s here)."""
    res = subprocess.run(["scontrol", "show", "job", "-o"], env={**os.environ, **cluster.env}, capture_output=True,
                         text=True, timeout=10, check=False)
    return [int(w.partition("=")[2]) for w in res.stdout.split() if w.startswith("JobId=")]


@pytest.mark.isolated
@pytest.mark.slow
def test_inside_a_batch_allocation_the_mesh_is_a_step_of_it(cluster: Any, tmp_path: Path) -> None:
    """A batch script of 2 nodes runs a SlurmJob client: it uses the allocation's nodes, submits no job."""
    output = tmp_path / "batch.out"
    script = f"#!/bin/sh\nexec {sys.executable} {SCENARIO} inside\n"
    sbatch = ["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", "--time=5", "--job-name=tetrarch-test-batch",
              f"--output={output}", f"--chdir={tmp_path}"]
    env = {**os.environ, **cluster.env}
    jobid = subprocess.run(sbatch, input=script, env=env, capture_output=True, text=True, timeout=30,
                           check=True).stdout.strip().split(";")[0]
    try:
        assert _wait_job_ended(cluster, jobid, 60) == "", cluster.job_state(jobid)
    finally:
        subprocess.run(["scancel", jobid], env=env, capture_output=True, timeout=10, check=False)
    text = output.read_text() if output.exists() else ""
    assert cluster.job_state(jobid) == "COMPLETED", text
    out = _lines(text)
    assert out[0]["jobid"] is None and out[0]["slurm_job_id"] == jobid, out[0]  # a step, not a job
    values = out[1]["values"]
    assert sorted((v["rank"]["hosts"], v["rank"]["procs"]) for _p, v in values) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert len({v["node"] for _p, v in values}) == 2, values
    assert [j for j in _job_ids(cluster) if j > int(jobid)] == [], "the client submitted a job of its own"
    _assert_job_gone(cluster, jobid)


def test_slurm_job_is_public_in_tetrarch_job_and_names_the_install_when_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tetrarch.job
    from tetrarch.job import SlurmJob as public
    from tetrarch_alloc_slurm import SlurmJob

    assert public is SlurmJob and "SlurmJob" in dir(tetrarch.job)
    monkeypatch.delitem(vars(tetrarch.job), "SlurmJob")  # the cached value: resolve again
    monkeypatch.setitem(sys.modules, "tetrarch_alloc_slurm", None)  # as if the plugin were not installed
    with pytest.raises(ImportError, match=r'pip install "tetrarch\[slurm\]"'):
        from tetrarch.job import SlurmJob
