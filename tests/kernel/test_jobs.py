"""Jobs (``tetrarch.job``) and how the allocator behind ``this_host()`` and a job is chosen.

A user who set ``TETRARCH_ALLOCATOR=slurm`` (or a typo) used to get local processes
from ``this_host()`` without a word, and a third-party allocator was reachable only
through a private constructor. Now a job gives named host meshes from any allocator,
chosen by the rules every backend follows, and ``this_host()`` refuses a choice it
cannot honour.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil
import pytest

from job_actors import Where
from tetrarch import ArgumentError, ArgumentTypeError, MeshStoppedError, this_host
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
