"""The peers' virtual environment for ``python -m benchmarks --peers``: Ray and Monarch, built once.

It lives outside the repository (``~/.cache/tetrarch-bench/peers-venv``, or
``$TETRARCH_BENCH_CACHE/peers-venv``) and is reused while the versions installed in it are
the pinned ones (:data:`PINS`); otherwise it is rebuilt. What was found about the pins:

* ``torchmonarch==0.7.0`` (one ``cp311 manylinux2014_x86_64`` wheel on PyPI) does not list
  torch among its requirements (``Requires-Dist``: pyzmq, pyarrow, numpy, cloudpickle,
  flask, py-spy, ...), but ``monarch.actor`` imports torch. A bare ``torch`` requirement
  would resolve to the newest CUDA build (several GB), so torch is installed first, pinned
  to :data:`TORCH` (the repository's Makefile pin), which pip's configuration on the
  development machine takes from a local CPU wheel.
* ``ray==2.60.0`` brings numpy, which the payload workload needs on every side.

Nothing here imports Ray or Monarch: they only ever run in the peers' interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["PINS", "TORCH", "PeersEnv", "ensure_peers_env"]

#: The peer frameworks and the distribution/version each is measured at.
PINS: dict[str, tuple[str, str]] = {"ray": ("ray", "2.60.0"), "monarch": ("torchmonarch", "0.7.0")}
#: Installed before the pins (see the module docstring).
TORCH = "torch==2.13.0"
#: Seconds each pip step may take.
PIP_TIMEOUT = 1800


class PeersEnv:
    """What :func:`ensure_peers_env` found or built: an interpreter per framework, or why not."""

    def __init__(self, python: str | None, versions: dict[str, str], errors: dict[str, str]) -> None:
        self.python = python
        self.versions = versions
        self.errors = errors

    def python_for(self, framework: str) -> tuple[str | None, str]:
        """The interpreter that runs ``framework`` and ``""``, or ``None`` and why it cannot run."""
        if self.python is None or framework not in self.versions:
            return None, self.errors.get(framework) or self.errors.get("venv") or f"{framework} is not installed"
        return self.python, ""


def cache_dir() -> Path:
    """Where the peers' environment lives (outside the repository)."""
    root = os.environ.get("TETRARCH_BENCH_CACHE") or os.path.join(Path.home(), ".cache", "tetrarch-bench")
    return Path(root)


def _installed(python: Path) -> dict[str, str]:
    """The versions of the pinned distributions installed for ``python`` (absent: left out)."""
    names = [dist for dist, _ in PINS.values()]
    code = ("import importlib.metadata as m, json, sys\nout = {}\nfor n in sys.argv[1:]:\n"
            "    try: out[n] = m.version(n)\n    except m.PackageNotFoundError: pass\nprint(json.dumps(out))")
    try:
        res = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True, timeout=60)
        return dict(json.loads(res.stdout)) if res.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}


def _pip(python: Path, log: Path, *args: str) -> str:
    """``python -m pip install *args``, output appended to ``log``; returns ``""`` or the error's tail."""
    with open(log, "a") as out:
        out.write(f"\n$ pip install {' '.join(args)}\n")
        out.flush()
        try:
            rc = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", *args],
                                stdout=out, stderr=subprocess.STDOUT, timeout=PIP_TIMEOUT).returncode
        except subprocess.TimeoutExpired:
            return f"pip install {' '.join(args)} took over {PIP_TIMEOUT} s (log: {log})"
    if rc == 0:
        return ""
    tail = log.read_text(errors="replace").strip().splitlines()[-3:]
    return f"pip install {' '.join(args)} failed ({rc}): {' | '.join(tail)} (log: {log})"


def ensure_peers_env(rebuild: bool = False) -> PeersEnv:
    """Find the peers' venv with the pinned versions, or (re)build it; never raises for a failed install.

    Each pin is installed on its own, so one that fails leaves the other framework usable
    (its column says ``n/a`` with the pip error).
    """
    venv = cache_dir() / "peers-venv"
    python = venv / "bin" / "python"
    want = dict(PINS.values())
    if python.exists() and not rebuild:
        have = _installed(python)
        if have == want:
            return PeersEnv(str(python), {fw: have[d] for fw, (d, _) in PINS.items()}, {})
    errors: dict[str, str] = {}
    try:
        venv.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return PeersEnv(None, {}, {"venv": f"cannot create {venv.parent}: {exc}"})
    log = venv.parent / "peers-install.log"
    started = time.monotonic()
    print(f"peers: building {venv} (once; log: {log}) ...", file=sys.stderr, flush=True)
    if not python.exists():
        res = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if res.returncode != 0:
            return PeersEnv(None, {}, {"venv": f"python -m venv failed: {res.stderr.strip()[-500:]}"})
    errors["torch"] = _pip(python, log, "--upgrade", "pip") or _pip(python, log, TORCH)
    for framework, (dist, version) in PINS.items():
        if errors["torch"] and framework == "monarch":
            errors[framework] = f"torch did not install: {errors['torch']}"
            continue
        if _installed(python).get(dist) != version:
            errors[framework] = _pip(python, log, f"{dist}=={version}")
    have = _installed(python)
    versions = {fw: have[d] for fw, (d, v) in PINS.items() if have.get(d) == v}
    for framework, (dist, version) in PINS.items():
        if framework not in versions and not errors.get(framework):
            errors[framework] = f"{dist}=={version} is not installed in {venv} (found {have.get(dist)})"
    print(f"peers: {venv} ready in {time.monotonic() - started:.0f} s: {versions or 'nothing installed'}",
          file=sys.stderr, flush=True)
    return PeersEnv(str(python), versions, {k: v for k, v in errors.items() if v})


if __name__ == "__main__":  # build (or check) the environment alone
    env = ensure_peers_env(rebuild="--rebuild" in sys.argv)
    print(json.dumps({"python": env.python, "versions": env.versions, "errors": env.errors}, indent=1))
