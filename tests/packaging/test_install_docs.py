"""What the README says about installing works without a package index, and ``scripts/wheels.py``'s
command line (issue 30, "installing from a clone"). Fast: no wheel is built here (test_wheels.py
builds and installs them, under ``make test-packaging``)."""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _wheels_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tetrarch_scripts_wheels_cli", REPO / "scripts" / "wheels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _install_commands() -> list[list[str]]:
    """The ``pip install`` commands in the code blocks of the README's ``## Install`` section."""
    section = (REPO / "README.md").read_text().partition("\n## Install\n")[2].partition("\n## ")[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    lines = [ln.partition("#")[0].strip() for block in blocks for ln in block.splitlines()]
    return [shlex.split(ln) for ln in lines if ln.startswith("pip install")]


def test_wheels_script_help_prints_usage_and_builds_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    wheels = _wheels_script()

    def no_build(*_a: object, **_k: object) -> None:
        raise AssertionError("--help must not build or download anything")

    monkeypatch.setattr(wheels, "build_wheels", no_build)
    monkeypatch.setattr(wheels, "fill_cache", no_build)
    monkeypatch.chdir(tmp_path)
    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as info:
            wheels.main([flag])
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: python scripts/wheels.py") and "WHEELDIR" in out and "--find-links" in out
    with pytest.raises(SystemExit) as info:
        wheels.main([])
    assert info.value.code == 2 and "WHEELDIR" in capsys.readouterr().err
    assert not list(tmp_path.iterdir()), "no folder named after an option"


def test_readme_installs_name_local_folders_or_the_built_wheels() -> None:
    commands = _install_commands()
    assert len(commands) >= 4, commands
    for cmd in commands:
        targets = [a for a in cmd[2:] if not a.startswith("-") and a != "dist/"]
        from_wheels = "--find-links" in cmd
        for target in targets:  # each either a folder of this repository or a name the built wheels provide
            if not from_wheels:
                folder = target.partition("[")[0]
                assert (REPO / folder / "pyproject.toml").is_file(), f"{shlex.join(cmd)}: {target} needs an index"
    assert any("--find-links" in c for c in commands) and any(c[2].startswith("./") for c in commands)
    readme = (REPO / "README.md").read_text()
    assert "scripts/wheels.py" in readme and "make venv" in readme


@pytest.mark.parametrize("doc", ["README.md", "docs/spmd.md"])
def test_torch_install_lines_bring_numpy(doc: str) -> None:
    text = (REPO / doc).read_text()
    lines = re.findall(r"`pip install torch==[^`]*`", text)  # the pinned install the docs recommend
    assert lines, f"{doc} shows no torch install"
    for line in lines:
        assert "numpy" in line, f"{doc}: {line} leaves out numpy (torch warns in every proc without it)"
