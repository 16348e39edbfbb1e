"""Build tetrarch's seven wheels and install them into fresh virtual environments.

Used by ``tests/packaging/test_wheels.py`` (``make test-packaging``); also runnable::

    python scripts/wheels.py WHEELDIR       # build the seven wheels into WHEELDIR
                                            # and fill the third-party cache

Wheels are built from a copy of each distribution's folder (setuptools writes
``build/`` and ``*.egg-info`` into the folder it builds), with the running
interpreter's pip and setuptools (``--no-build-isolation``: nothing is downloaded).

The third-party wheels the seven need (their non-tetrarch requirements, read from the
``pyproject.toml`` files, plus ``torch==2.13.0``) are downloaded once, through pip's
ordinary configuration, into ``.cache/wheels`` (git-ignored). Environments are then
installed from the wheel folder and that cache only (``--no-index``, pip's
configuration ignored): what an install needs and the wheels do not declare fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Third-party wheels, downloaded once (``make distclean`` removes them).
CACHE = REPO / ".cache" / "wheels"
#: EXACTLY this pin (as in the Makefile): pip's configuration find-links a cached CPU
#: wheel of it; an unpinned torch pulls several GB of CUDA wheels.
TORCH = "torch==2.13.0"
#: What setuptools leaves in a source folder it builds; never copied, never left behind.
LITTER = ("build", "dist", "*.egg-info", "__pycache__", "tests")

__all__ = [
    "CACHE", "REPO", "TORCH", "build_wheels", "distribution_dirs", "fill_cache", "install", "litter",
    "make_venv", "readme_quickstart", "run", "share_dir", "third_party_requirements",
]


def distribution_dirs() -> list[Path]:
    """``core`` and every ``plugins/*`` folder with a ``pyproject.toml``."""
    return [REPO / "core", *sorted(p.parent for p in REPO.glob("plugins/*/pyproject.toml"))]


def litter() -> set[Path]:
    """The build outputs present in the distribution folders (should stay unchanged)."""
    found: set[Path] = set()
    for folder in distribution_dirs():
        for pattern in ("build", "dist", "*.egg-info", "src/*.egg-info"):
            found.update(folder.glob(pattern))
    return found


def run(cmd: Sequence[str | os.PathLike[str]], *, timeout: float, env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own session; past ``timeout`` s its whole process group is killed.

    Raises:
        subprocess.CalledProcessError: it exited non-zero (its output is attached).
        subprocess.TimeoutExpired: it ran past ``timeout``.
    """
    with subprocess.Popen([os.fspath(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True, env=env, cwd=cwd,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, out, err)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _pip(python: str | os.PathLike[str] = sys.executable) -> list[str]:
    return [os.fspath(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]


def offline_env() -> dict[str, str]:
    """This environment without pip's configuration (index, find-links) or a PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def build_wheels(dest: Path, *, timeout: float = 300) -> list[Path]:
    """Build the wheel of each distribution into ``dest`` (from copies of the folders).

    Raises:
        subprocess.CalledProcessError: a build failed.
    """
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tetrarch-sdist-") as tmp:
        copies = []
        for folder in distribution_dirs():
            copy = Path(tmp) / folder.name
            shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(*LITTER))
            copies.append(copy)
        run([*_pip(), "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dest, *copies],
            timeout=timeout, env=offline_env())
    return sorted(dest.glob("*.whl"))


def third_party_requirements() -> list[str]:
    """The non-tetrarch requirements of the seven distributions, and the torch pin."""
    import tomllib  # Python 3.11+; only this helper needs it

    found: set[str] = set()
    for folder in distribution_dirs():
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        found.update(r for r in project.get("dependencies", ()) if not re.match(r"tetrarch\b", r))
    return [*sorted(found), TORCH]


def fill_cache(cache: Path = CACHE, *, timeout: float = 600) -> Path:
    """Download the third-party wheels into ``cache`` unless it already holds this list.

    Uses pip's ordinary configuration (an index or its find-links); the list is kept in
    ``cache/requirements.txt`` and a changed list downloads again.

    Raises:
        subprocess.CalledProcessError: the download failed (no network, no such wheel).
    """
    wanted = "\n".join(third_party_requirements()) + "\n"
    stamp = cache / "requirements.txt"
    if stamp.is_file() and stamp.read_text() == wanted:
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run([*_pip(), "download", "--only-binary=:all:", "--dest", cache, *wanted.split()], timeout=timeout, env=env)
    stamp.write_text(wanted)
    return cache


def make_venv(path: Path, *, timeout: float = 120) -> Path:
    """A fresh virtual environment without pip (pip is run from outside); its python."""
    run([sys.executable, "-m", "venv", "--without-pip", path], timeout=timeout)
    return path / "bin" / "python"


def install(python: Path, requirements: Sequence[str], find_links: Sequence[Path], *, timeout: float = 300,
            target: Path | None = None) -> None:
    """``pip install`` into ``python``'s environment (or ``target``) from ``find_links`` only.

    Raises:
        subprocess.CalledProcessError: pip failed (e.g. a requirement no folder holds).
    """
    links = [arg for folder in find_links for arg in ("--find-links", os.fspath(folder))]
    where = ["--target", os.fspath(target)] if target is not None else []
    run([*_pip(), "--python", python, "install", "--no-index", *links, *where, *requirements],
        timeout=timeout, env=offline_env())


def share_dir(python: Path, folder: Path) -> None:
    """Put ``folder`` on the ``sys.path`` of ``python``'s environment (a ``.pth`` file)."""
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], timeout=60).stdout
    (Path(purelib.strip()) / "tetrarch_test_shared.pth").write_text(os.fspath(folder) + "\n")


def readme_quickstart(readme: str) -> str:
    """The first ``python`` code block under the README's ``## Quickstart`` heading.

    Raises:
        ValueError: there is none.
    """
    section = readme.partition("\n## Quickstart\n")[2].partition("\n## ")[0]
    code = section.partition("\n```python\n")[2]
    if not section or "\n```" not in code:
        raise ValueError("README.md has no ```python block under '## Quickstart'")
    return code.partition("```")[0]


def main(argv: Sequence[str]) -> int:
    """``python scripts/wheels.py WHEELDIR``: build the seven wheels there, then fill the cache.

    Raises:
        SystemExit: ``--help`` (status 0, after printing the usage) or bad arguments (status 2).
        subprocess.CalledProcessError: a build or the download failed.
    """
    parser = argparse.ArgumentParser(
        prog="python scripts/wheels.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build tetrarch's seven wheels (core and the six plugins) into WHEELDIR, then download\n"
                    "the third-party wheels they need into .cache/wheels (through pip's configuration).",
        epilog="Install from them without an index, e.g.:\n"
               '  pip install --find-links WHEELDIR --find-links .cache/wheels "tetrarch[zmq]"',
    )
    parser.add_argument("wheeldir", metavar="WHEELDIR", type=Path, help="folder for the wheels (created if missing)")
    args = parser.parse_args(argv)
    wheels = build_wheels(args.wheeldir)
    print("\n".join(str(w) for w in wheels))
    print(f"third-party wheels: {fill_cache()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
