"""Every install the README shows runs the README's quickstart, from wheels alone.

The seven wheels are built once (from copies of the source folders); each install gets
a fresh virtual environment filled from that wheel folder and the third-party wheel
cache only (``--no-index``; see ``scripts/wheels.py``), and runs the quickstart code
block of README.md in a fresh interpreter outside the repository: first without torch,
then with torch importable. The ``tetrarch[zmq,nng]`` environment also runs a two-proc
actor program (``programs/two_procs.py``) with every process on zmq, then on nng.

The ``local`` allocator (``this_host()``) is a plugin, ``tetrarch-alloc-local``, which
``tetrarch`` depends on: every install, a plain ``pip install tetrarch`` first, gets it
from the wheels and runs the quickstart through its entry point; the plain install then
uninstalls it and checks that the quickstart fails naming ``pip install tetrarch-alloc-local``.

torch is installed once (``pip install --target`` from the cache, about 15 s) into a
folder that the "with torch" runs put on their path with a ``.pth`` file, instead of
installing its 190 MB wheel into each environment.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tetrarch.testing import scaled

pytestmark = [pytest.mark.packaging, pytest.mark.slow, pytest.mark.timeout(scaled(900))]

REPO = Path(__file__).resolve().parents[2]
#: The installs the README shows (and the issue names), as pip requirements.
INSTALLS = ["tetrarch", "tetrarch[zmq,nng]", "tetrarch[zmq,slurm]", "tetrarch[all]"]
#: Installs that also run a two-proc actor program on each of these plugin transports.
PLUGIN_TRANSPORTS = {"tetrarch[zmq,nng]": ("zmq", "nng")}
TWO_PROCS = Path(__file__).resolve().parent / "programs" / "two_procs.py"
SEVEN = {"tetrarch", "tetrarch_transport_zmq", "tetrarch_transport_nng", "tetrarch_rdma_verbs",
         "tetrarch_rdma_efa", "tetrarch_alloc_local", "tetrarch_alloc_slurm"}

#: Run in each environment after the quickstart: where tetrarch came from, whether torch
#: imports, which distribution provides the local allocator (and from where), whether core
#: still ships an allocator module of its own.
PROBE = """
import importlib.util, json, tetrarch
from tetrarch._plugins import Registry
(row,) = [r for r in Registry().statuses() if r.kind.value == "allocator" and r.name == "local"]
print(json.dumps({"tetrarch": tetrarch.__file__, "torch": importlib.util.find_spec("torch") is not None,
                  "local": [row.distribution, row.status.value, row.spec and row.spec.factory],
                  "alloc_local": importlib.util.find_spec("tetrarch_alloc_local").origin,
                  "core_local": importlib.util.find_spec("tetrarch._runtime._local_alloc") is not None}))
"""
#: The plain install, its ``local`` allocator uninstalled: what ``this_host()`` must say.
NO_LOCAL = "pip install tetrarch-alloc-local"


def _load_helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tetrarch_scripts_wheels", REPO / "scripts" / "wheels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and friends look their module up
    spec.loader.exec_module(module)
    return module


wheels = _load_helper()


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """Wheels, environments and the quickstart file, all removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="tetrarch-packaging-") as tmp:
        yield Path(tmp)


@pytest.fixture(scope="module")
def wheelhouse(workdir: Path) -> Path:
    before = wheels.litter()
    started = time.monotonic()
    built = wheels.build_wheels(workdir / "wheels", timeout=scaled(300))
    print(f"\nbuilt {len(built)} wheels in {time.monotonic() - started:.1f} s")
    assert {w.name.split("-")[0] for w in built} == SEVEN
    assert wheels.litter() == before, "building the wheels left build output in the source folders"
    return workdir / "wheels"


@pytest.fixture(scope="module")
def cache() -> Path:
    return wheels.fill_cache(timeout=scaled(600))


@pytest.fixture(scope="module")
def torch_dir(workdir: Path, cache: Path) -> Path:
    started = time.monotonic()
    target = workdir / "torch"
    # torch alone: its own requirements, none of tetrarch's (those come with each install)
    python = wheels.make_venv(workdir / "torch-venv")
    wheels.install(python, [wheels.TORCH], [cache], target=target, timeout=scaled(300))
    print(f"\ninstalled {wheels.TORCH} into a shared folder in {time.monotonic() - started:.1f} s")
    return target


@pytest.fixture(scope="module")
def quickstart(workdir: Path) -> Path:
    path = workdir / "run" / "quickstart.py"  # its own folder: `python -c` puts the cwd on sys.path
    path.parent.mkdir()
    path.write_text(wheels.readme_quickstart((REPO / "README.md").read_text()))
    return path


def _python(python: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = wheels.offline_env()  # keeps the suite's leak marker; drops PYTHONPATH
    try:
        return wheels.run([python, *args], timeout=scaled(120), env=env, cwd=cwd)
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"{' '.join(map(str, exc.cmd))} exited {exc.returncode}\n--- stdout ---\n{exc.stdout}\n"
                    f"--- stderr ---\n{exc.stderr}", pytrace=False)


def _check_quickstart(python: Path, quickstart: Path, *, torch: bool) -> None:
    result = _python(python, quickstart, cwd=quickstart.parent)
    lines = result.stdout.splitlines()
    assert lines and lines[-1] == "1", result.stdout  # the last print: one counter, incremented once
    assert "Traceback" not in result.stderr, result.stderr
    probe = _python(python, "-c", PROBE, cwd=quickstart.parent)
    seen = json.loads(probe.stdout)
    venv = str(python.parent.parent)
    assert seen["tetrarch"].startswith(venv), seen  # the wheel, not the source tree
    assert seen["torch"] is torch
    # this_host()'s allocator came with the plugin core depends on, through its entry point
    assert seen["local"] == ["tetrarch-alloc-local", "available", "tetrarch_alloc_local._local:LocalAllocator"]
    assert seen["alloc_local"].startswith(venv), seen
    assert seen["core_local"] is False, seen


def test_the_readme_quickstart_is_found() -> None:
    code = wheels.readme_quickstart((REPO / "README.md").read_text())
    assert "this_host().spawn_procs" in code and code.endswith("procs.stop().get()\n")


@pytest.mark.isolated  # fresh interpreters, in fresh virtual environments
@pytest.mark.parametrize("requirement", INSTALLS)
def test_install_runs_the_readme_quickstart(requirement: str, workdir: Path, wheelhouse: Path, cache: Path,
                                            torch_dir: Path, quickstart: Path) -> None:
    env = workdir / ("venv-" + requirement.replace("[", "-").replace(",", "-").rstrip("]"))
    started = time.monotonic()
    python = wheels.make_venv(env)
    wheels.install(python, [requirement], [wheelhouse, cache], timeout=scaled(300))
    installed = time.monotonic()
    _check_quickstart(python, quickstart, torch=False)
    plain = time.monotonic()
    wheels.share_dir(python, torch_dir)
    _check_quickstart(python, quickstart, torch=True)
    print(f"\n{requirement}: install {installed - started:.1f} s, quickstart {plain - installed:.1f} s, "
          f"with torch {time.monotonic() - plain:.1f} s")
    for transport in PLUGIN_TRANSPORTS.get(requirement, ()):
        _check_two_procs(python, quickstart.parent, transport)
    if requirement == "tetrarch":
        _check_without_the_local_allocator(python, quickstart)


def _check_without_the_local_allocator(python: Path, quickstart: Path) -> None:
    """``pip uninstall tetrarch-alloc-local`` (core's dependency): the quickstart fails saying to install it."""
    wheels.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python, "uninstall", "-y",
                "tetrarch-alloc-local"], timeout=scaled(120), env=wheels.offline_env())
    result = subprocess.run([python, quickstart], capture_output=True, text=True, timeout=scaled(120),
                            env=wheels.offline_env(), cwd=quickstart.parent, check=False)
    assert result.returncode != 0, result.stdout
    assert "BackendUnavailable: this_host() starts its host agent with the 'local' allocator" in result.stderr, \
        result.stderr
    assert NO_LOCAL in result.stderr, result.stderr


def _check_two_procs(python: Path, cwd: Path, transport: str) -> None:
    """Client, host agent and two procs on ``transport``, from the installed wheels alone."""
    program = cwd / TWO_PROCS.name
    program.write_text(TWO_PROCS.read_text())
    env = wheels.offline_env() | {"TETRARCH_TRANSPORT": transport}
    try:
        result = wheels.run([python, program], timeout=scaled(120), env=env, cwd=cwd)
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"two procs on {transport} exited {exc.returncode}\n--- stdout ---\n{exc.stdout}\n"
                    f"--- stderr ---\n{exc.stderr}", pytrace=False)
    assert result.stdout.splitlines() == ["answers [42, 42]", f"schemes ['{transport}+ipc']",
                                          f"transport {transport}"], result.stdout
