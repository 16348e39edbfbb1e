"""A real local Slurm cluster for the Slurm tests, started once per session per layout.

``plain``: two slurmd on 127.0.0.1; ``netns``: two slurmd in network + UTS namespaces
(h1, h2 at 10.99.0.1-2; scripts/fake-hosts). Both run side by side (their own state
directories and ports) and are stopped at the end of the session; the daemons are
started without the suite's process marker, so the leak check sees only what the
tests started (host agents and procs carry it through sbatch's --export=ALL).

The scenarios run in fresh interpreters through ``run_scenario`` and ``start_scenario``
(for tests marked ``isolated``), as core's tests/conftest.py provides them to core's tests:
this distribution's tests run without core's test folder (``pytest plugins/alloc_slurm/tests``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tetrarch.testing.scenario import Started, require_isolated, run_scenario

REPO = Path(__file__).resolve().parents[3]
LOCAL_SLURM = REPO / "scripts" / "local-slurm"
FAKE_HOSTS = REPO / "scripts" / "fake-hosts"
SESSION_ENV = "TETRARCH_TEST_SESSION"
LAYOUTS = {"plain": ("/tmp/tetrarch-test-slurm-plain", "17817", []),
           "netns": ("/tmp/tetrarch-test-slurm-netns", "17917", ["--netns"])}


@dataclass(frozen=True)
class Cluster:
    layout: str
    dir: Path
    env: dict[str, str]  # SLURM_CONF, for the scenarios and the Slurm tools

    def squeue(self, jobid: str) -> str:
        res = subprocess.run(["squeue", "-h", "-j", jobid, "-o", "%T"], env={**os.environ, **self.env},
                             capture_output=True, text=True, timeout=10, check=False)
        return res.stdout.strip()

    def job_state(self, jobid: str) -> str:
        res = subprocess.run(["scontrol", "show", "job", jobid, "-o"], env={**os.environ, **self.env},
                             capture_output=True, text=True, timeout=10, check=False)
        for word in res.stdout.split():
            if word.startswith("JobState="):
                return word.partition("=")[2]
        return "GONE"


def _script_env(dir_: str, port: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != SESSION_ENV}
    env.update(LOCAL_SLURM_DIR=dir_, LOCAL_SLURM_PORT=port, FAKE_HOSTS=str(FAKE_HOSTS))
    return env


class _Clusters:
    def __init__(self) -> None:
        self.started: dict[str, Cluster] = {}

    def get(self, layout: str) -> Cluster:
        if layout in self.started:
            return self.started[layout]
        if os.geteuid() != 0:
            pytest.skip("the local Slurm cluster needs root (SlurmUser=root, network namespaces)")
        dir_, port, flags = LAYOUTS[layout]
        res = subprocess.run([str(LOCAL_SLURM), "start", "--nodes", "2", *flags], env=_script_env(dir_, port),
                             capture_output=True, text=True, timeout=300, check=False)
        if res.returncode != 0:
            self._stop(layout)
            pytest.fail(f"local-slurm start ({layout}) failed:\n{res.stdout}\n{res.stderr}", pytrace=False)
        cluster = Cluster(layout, Path(dir_), {"SLURM_CONF": f"{dir_}/slurm.conf"})
        self.started[layout] = cluster
        return cluster

    def _stop(self, layout: str) -> None:
        dir_, port, _ = LAYOUTS[layout]
        subprocess.run([str(LOCAL_SLURM), "stop"], env=_script_env(dir_, port), capture_output=True,
                       timeout=120, check=False)

    def stop_all(self) -> None:
        for layout in list(self.started):
            self._stop(layout)
            del self.started[layout]


_CLUSTERS = _Clusters()


@pytest.fixture(scope="session")
def slurm_clusters() -> _Clusters:
    """The session's clusters; stopped in ``pytest_sessionfinish``, not in a fixture's teardown,
    which would run inside the last test's time limit (``local-slurm stop`` waits for daemons)."""
    return _CLUSTERS


def pytest_configure(config: pytest.Config) -> None:
    """The session's programs keep their telemetry stores' files in one temporary folder, removed
    at the end (as core's tests/conftest.py does; this folder's tests also run without it)."""
    if not os.environ.get("TETRARCH_TELEMETRY_DIR"):
        folder = tempfile.mkdtemp(prefix="tetrarch-test-telemetry-")
        os.environ["TETRARCH_TELEMETRY_DIR"] = folder
        atexit.register(shutil.rmtree, folder, True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _CLUSTERS.stop_all()


@pytest.fixture(params=sorted(LAYOUTS))
def cluster(request: pytest.FixtureRequest, slurm_clusters: _Clusters) -> Cluster:
    """The local cluster of one layout (started on first use)."""
    if shutil.which("sbatch") is None and os.environ.get("LOCAL_SLURM_NO_INSTALL") == "1":
        pytest.skip("Slurm is not installed and LOCAL_SLURM_NO_INSTALL=1")
    return slurm_clusters.get(request.param)


# ------------------------------------------------------------------ fresh interpreters


@pytest.fixture(name="run_scenario")
def _run_scenario_fixture(request: pytest.FixtureRequest) -> Callable[..., subprocess.CompletedProcess[str]]:
    """:func:`tetrarch.testing.scenario.run_scenario`, for a test marked ``isolated``."""
    require_isolated(request)
    return run_scenario


@pytest.fixture
def start_scenario(request: pytest.FixtureRequest) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """``start_scenario(path, *args, env=None, **popen_kwargs) -> Popen`` (:class:`tetrarch.testing.scenario.Started`):
    what still runs in the started programs' process groups at teardown is killed."""
    require_isolated(request)
    started = Started()
    yield started.start
    started.close()
