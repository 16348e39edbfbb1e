"""Jobs (``tetrarch.job``) and how the allocator behind ``this_host()`` and a job is chosen.

A user who set ``TETRARCH_ALLOCATOR=slurm`` (or a typo) used to get local processes
from ``this_host()`` without a word, and a third-party allocator was reachable only
through a private constructor. Now a job gives named host meshes from any allocator,
chosen by the rules every backend follows, and ``this_host()`` refuses a choice it
cannot honour.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil
import pytest

from job_actors import Where
from tetrarch import ArgumentError, ArgumentTypeError, MeshStoppedError, NotSupportedError, this_host
from tetrarch.job import AllocatorJob, JobState, LocalJob, MeshNotFoundError, ProcessJob
from tetrarch.plugins import BackendNotFound, BackendUnavailable
from tetrarch.testing import scaled

# Which allocator is chosen; calls over the transport are covered elsewhere (run once, not per transport).
pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(120))]

HERE = Path(__file__).parent
SCENARIO = HERE / "scenarios" / "job_select.py"
THIRD_PARTY = HERE / "third_party_alloc"


def _extent(mesh: Any) -> dict[str, int]:
    return dict(zip(mesh.extent.labels, mesh.extent.sizes, strict=True))


def _alive(pids: Iterable[int]) -> list[int]:
    """Those of ``pids`` still running, after giving them a bounded time to end."""
    procs = []
    for pid in set(pids):
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=scaled(10))
    return [p.pid for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


# --------------------------------------------------------------------------- jobs in this process


def test_a_job_of_two_named_meshes_spawns_calls_slices_and_kill_leaves_no_process(faults) -> None:
    job = ProcessJob({"trainers": 2, "workers": 1})
    state = job.state()
    assert list(state) == ["trainers", "workers"] and len(state) == 2
    assert state.trainers is state["trainers"] and job.state().trainers is state.trainers  # applied once
    assert _extent(state.trainers) == {"hosts": 2} and _extent(state.workers) == {"hosts": 1}

    trainers = state.trainers.spawn_procs(per_host={"gpus": 2}, name="trainers")
    assert _extent(trainers) == {"hosts": 2, "gpus": 2}
    where = trainers.spawn("where", Where)
    by_host = {h: {ppid for _pid, ppid in where.slice(hosts=h).pids.call().get().values()} for h in (0, 1)}
    assert len(by_host[0]) == len(by_host[1]) == 1 and by_host[0] != by_host[1], "one host agent per host"

    second = state.trainers.slice(hosts=1).spawn_procs(per_host={"gpus": 1}, name="second")
    pid, agent = second.spawn("where", Where).pids.call_one().get()
    assert {agent} == by_host[1], "a slice spawns on the host it names"

    workers = state.workers.spawn_procs(name="workers")
    worker_pid, worker_agent = workers.spawn("where", Where).pids.call_one().get()
    assert worker_agent not in by_host[0] | by_host[1], "each named mesh has its own host agents"

    started = {pid, worker_pid, worker_agent, *by_host[0], *by_host[1]}
    started |= {p for p, _ in where.pids.call().get().values()}
    job.kill()
    assert not job.running
    assert _alive(started) == [], "kill() must end every proc and host agent of the job"
    job.kill()  # idempotent
    with pytest.raises(MeshStoppedError):
        state.trainers.spawn_procs()
    with pytest.raises(MeshStoppedError):
        state.trainers.slice(hosts=0).spawn_procs()
    assert faults.items == [], "a killed job's procs are stopped, not failed"


def test_the_job_state_names_its_meshes_when_asked_for_another() -> None:
    mesh = this_host()
    state = JobState({"trainers": mesh, "workers": mesh})
    with pytest.raises(AttributeError, match=r"no host mesh named 'trainer'; its meshes: trainers, workers"):
        _ = state.trainer
    with pytest.raises(KeyError, match=r"no host mesh named 'trainer'; its meshes: trainers, workers"):
        _ = state["trainer"]
    with pytest.raises(MeshNotFoundError):
        _ = state.trainer
    assert not hasattr(state, "trainer") and "workers" in dir(state)


@pytest.mark.parametrize(("meshes", "error", "text"), [
    ({}, ArgumentError, "at least one named mesh"),
    ({"trainers": 0}, ArgumentError, "at least 1"),
    ({"trainers": "2"}, ArgumentTypeError, "must be an int"),
    ({"trainers": True}, ArgumentTypeError, "must be an int"),
    ({"two words": 1}, ArgumentError, "identifier"),
    ({"_private": 1}, ArgumentError, "identifier"),
    (["trainers"], ArgumentTypeError, "mapping of mesh name to host count"),
])
def test_a_bad_spec_says_what_a_job_needs(meshes: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        AllocatorJob(meshes)


def test_a_job_honours_the_allocator_setting_and_never_swaps_a_bad_choice(monkeypatch) -> None:
    monkeypatch.setenv("TETRARCH_ALLOCATOR", "bogus")
    job = AllocatorJob({"trainers": 1})
    with pytest.raises(BackendNotFound, match=r"no allocator backend named 'bogus' \(chosen by TETRARCH_ALLOCATOR"):
        job.state()
    assert not job.running
    with pytest.raises(BackendNotFound, match=r"name='nope'"):  # the argument outranks the setting
        AllocatorJob({"trainers": 1}, allocator="nope").apply()
    monkeypatch.delenv("TETRARCH_ALLOCATOR")
    with pytest.raises((BackendNotFound, BackendUnavailable), match="slurm"):
        AllocatorJob({"trainers": 1}, allocator="slurm").apply()


def test_a_local_job_is_this_host_and_the_with_block_kills_it() -> None:
    with LocalJob(hosts=("trainers", "workers")) as job:
        state = job.state()
        assert state.trainers is state.workers is this_host()
        procs = state.trainers.spawn_procs(name="local")
        pid, agent = procs.spawn("where", Where).pids.call_one().get()
    assert not job.running
    assert _alive([pid, agent]) == []
    again = this_host().spawn_procs(name="after")  # a fresh agent on the next use
    assert again.spawn("where", Where).pids.call_one().get()[1] != agent
    again.stop().get(timeout=scaled(30))


# --------------------------------------------------------------------------- the environment decides


@pytest.fixture(scope="module")
def third_party_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding an installed third-party allocator distribution (``tetrarch-test-alloc``)."""
    site = tmp_path_factory.mktemp("third-party-site")
    for module in THIRD_PARTY.glob("*.py"):
        shutil.copy(module, site)
    info = site / "tetrarch_test_alloc-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tetrarch-test-alloc\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tetrarch]\ntagged = tetrarch_test_alloc\n")
    return site


@pytest.fixture
def select(run_scenario: Callable[..., Any], third_party_site: Path) -> Callable[..., dict]:
    """Run the scenario with the third-party allocator installed; its JSON line."""

    def run(*args: str, **env: str) -> dict:
        res = run_scenario(SCENARIO, *args, timeout=60, env=env, pythonpath=[third_party_site])
        assert res.returncode == 0, res.stdout + res.stderr
        return json.loads(res.stdout.strip().splitlines()[-1])

    return run


@pytest.mark.isolated
def test_this_host_refuses_an_allocator_that_is_not_installed(select) -> None:
    out = select("this_host", TETRARCH_ALLOCATOR="bogus")
    assert out["error"] == "BackendNotFound", out
    assert "no allocator backend named 'bogus' (chosen by TETRARCH_ALLOCATOR=bogus)" in out["message"]
    assert "local (available)" in out["message"] and "tagged (available)" in out["message"]
    assert out["children"] == 0, "nothing may start on a refused choice"


@pytest.mark.isolated
def test_this_host_refuses_an_allocator_that_cannot_start_hosts_here_and_names_the_fix(select) -> None:
    out = select("this_host", TETRARCH_ALLOCATOR="slurm")
    assert out["error"] == "BackendUnavailable", out
    message = out["message"]
    assert message.startswith("this_host() is this machine, but TETRARCH_ALLOCATOR=slurm chose allocator 'slurm'")
    assert "tetrarch.job.AllocatorJob({'hosts': N}, allocator='slurm')" in message
    assert "unset TETRARCH_ALLOCATOR" in message and "(local, tagged)" in message
    assert out["children"] == 0


@pytest.mark.isolated
@pytest.mark.parametrize(("allocator", "by"), [("local", "None"), ("tagged", "tagged")])
def test_this_host_uses_the_same_host_allocator_the_variable_names(select, allocator: str, by: str) -> None:
    out = select("this_host", TETRARCH_ALLOCATOR=allocator)
    assert out.get("error") is None, out
    assert out["TEST_ALLOC_BY"] == [by], out


@pytest.mark.isolated
def test_a_third_party_allocator_is_reachable_by_name_through_the_public_job_api(select) -> None:
    out = select("job", "tagged")
    assert out.get("error") is None, out
    assert out["TEST_ALLOC_BY"] == ["tagged"] and out["TEST_ALLOC_MESH"] == ["trainers"], out
    assert out["TEST_ALLOC_TAG"] == ["t1"], "the job's options reach the allocator"
    assert out["left"] == 0, "leaving the with block killed the job's agents"


@pytest.mark.isolated
def test_a_job_without_a_name_takes_the_variable(select) -> None:
    assert select("job", TETRARCH_ALLOCATOR="tagged")["TEST_ALLOC_BY"] == ["tagged"]


@pytest.mark.isolated
def test_a_policy_hook_chooses_the_allocator_of_jobs_and_this_host(select) -> None:
    assert select("job")["TEST_ALLOC_BY"] == ["None"], "without the policy, priority picks local"
    assert select("job", TEST_ALLOC_POLICY="tagged")["TEST_ALLOC_BY"] == ["tagged"]
    assert select("this_host", TEST_ALLOC_POLICY="tagged")["TEST_ALLOC_BY"] == ["tagged"]


# --------------------------------------------------------------------------- Monarch's smaller job and mesh APIs


def test_bootstrap_command_sets_how_procs_start_and_refuses_what_cannot_work() -> None:
    from tetrarch import BootstrapCommand, ProcessStartError, default_bootstrap_cmd

    host = this_host()
    assert host.initialized.get(timeout=scaled(60)) is True
    cmd = default_bootstrap_cmd().with_env({"TEST_BOOT": "uniform"})
    procs = host.spawn_procs(per_host={"gpus": 2}, name="boot", bootstrap_command=cmd)
    assert set(procs.spawn("where", Where).env.call("TEST_BOOT").get().values()) == {"uniform"}
    procs.stop().get(timeout=scaled(30))
    per_rank = host.spawn_procs(per_host={"gpus": 2}, name="boot2",
                                bootstrap_command=lambda p: cmd.with_env({"TEST_BOOT": f"r{p['gpus']}"}))
    assert sorted(per_rank.spawn("where", Where).env.call("TEST_BOOT").get().values()) == ["r0", "r1"]
    per_rank.stop().get(timeout=scaled(30))
    with pytest.raises(ProcessStartError, match="cannot start /nonexistent/python"):
        host.spawn_procs(name="bad", bootstrap_command=BootstrapCommand("/nonexistent/python"))
    with pytest.raises(ArgumentError, match="arg0"):
        BootstrapCommand("python3", arg0="other")
    with pytest.raises(ArgumentTypeError, match="BootstrapCommand or a function"):
        host.spawn_procs(name="bad", bootstrap_command="python3")  # type: ignore[arg-type]


def test_a_process_job_passes_env_to_its_host_agents_and_procs_and_keeps_no_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with ProcessJob({"trainers": 1}, env={"TEST_JOB_ENV": "yes"}) as job:
        assert not job.active and job.apply_id is None
        procs = job.state().trainers.spawn_procs(name="env")
        assert job.active and job.apply_id is not None and job.can_run(job) is False
        assert procs.spawn("where", Where).env.call_one("TEST_JOB_ENV").get() == "yes"
    assert not (tmp_path / ".monarch").exists(), "hosts that end with the client are not cached by default"
    with pytest.raises(NotSupportedError, match="LocalJob can"):
        ProcessJob({"trainers": 1}).apply(client_script="train.py")


def test_a_dump_is_private_and_loads_back_and_a_stale_cache_is_replaced(tmp_path) -> None:
    from tetrarch.job import job_load, job_loads

    job = LocalJob(hosts=("a", "b"))
    path = tmp_path / "new" / "job.pkl"
    job.dump(path)
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert repr(job_load(path)) == repr(job) == repr(job_loads(job.dumps()))
    path.chmod(0o622)
    with pytest.raises(PermissionError, match="chmod 600"):
        job_load(path)
    with pytest.raises(ArgumentTypeError, match="not a job"):
        job_loads(pickle.dumps({"not": "a job"}))
    stale = ProcessJob({"trainers": 1})
    stale._running = True  # as a dump of a running job from an earlier process
    stale.dump(tmp_path / "cache.pkl")
    with LocalJob() as local:
        state = local.state(cached_path=tmp_path / "cache.pkl")  # ProcessJob.can_run is False: apply, and cache
        assert state.hosts is this_host() and local.apply_id is not None
        assert isinstance(job_load(tmp_path / "cache.pkl"), LocalJob)


@pytest.mark.isolated
def test_a_local_job_runs_a_client_script_in_batch_mode(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "client.py"
    script.write_text(
        "import os\n"
        "from job_actors import Where\n"
        "from tetrarch.job import LocalJob\n"
        "procs = LocalJob().state().hosts.spawn_procs(name='batch')\n"
        "print('batch', os.environ['MONARCH_BATCH_JOB'], procs.spawn('w', Where).env.call_one('MONARCH_BATCH_JOB')"
        ".get(), flush=True)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    job = LocalJob()
    job.apply(client_script=str(script))
    assert job.process.wait(scaled(90)) == 0, (Path(job.log_dir) / "stderr.log").read_text()
    assert (Path(job.log_dir) / "stdout.log").read_text().strip() == "batch 1 1"
    assert (tmp_path / ".monarch" / "job_state.pkl").stat().st_mode & 0o777 == 0o600
