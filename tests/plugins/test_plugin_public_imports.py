"""Plugins and examples use only tetrarch's public API, and ``make lint`` keeps it so.

``make lint`` bans every private tetrarch module in ``plugins/`` and ``examples/`` (ruff's
TID251 with the ``banned-api`` table of the root pyproject.toml). That table names modules
one by one, so a new private module must join it: the first test says which. The second
reads the plugins' and examples' sources themselves, so it also catches what no import rule
sees (a module named in a string, as in a ``python -m`` command line).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import tetrarch

pytestmark = pytest.mark.transport_independent

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(tetrarch.__file__).parent
PRIVATE_NAME = re.compile(r"\btetrarch(?:\.[A-Za-z]\w*)*\._[A-Za-z]\w*")


def _private_modules() -> set[str]:
    """Every private module or package whose parent is public: ``tetrarch._runtime``, ``tetrarch.testing._kit``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        parts = ["tetrarch", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] in ("__init__", "__main__"):
            parts.pop()
        for i, part in enumerate(parts):
            if part.startswith("_"):
                found.add(".".join(parts[: i + 1]))
                break
    return found


@pytest.mark.skipif(sys.version_info < (3, 11), reason="reading pyproject.toml needs tomllib (Python 3.11)")
def test_the_lint_ban_covers_every_private_module() -> None:
    import tomllib

    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    banned = set(lint["flake8-tidy-imports"]["banned-api"])
    missing = sorted(m for m in _private_modules()
                     if not any(m == b or m.startswith(b + ".") for b in banned))
    assert not missing, (f"add to [tool.ruff.lint.flake8-tidy-imports.banned-api] in pyproject.toml: {missing} "
                         "(plugins and examples must not import them)")
    assert "TID251" in lint["select"]
    assert lint["per-file-ignores"]["!{plugins,examples}/**"] == ["TID251"]


def test_no_plugin_or_example_source_names_a_private_tetrarch_module() -> None:
    files = [p for pattern in ("plugins/*/src/**/*.py", "examples/*/src/**/*.py") for p in ROOT.glob(pattern)]
    assert files
    found = [f"{p.relative_to(ROOT)}:{n}: {m.group()}" for p in files
             for n, line in enumerate(p.read_text().splitlines(), 1) if (m := PRIVATE_NAME.search(line))]
    assert not found, "private tetrarch modules named outside core (use tetrarch.plugins...):\n" + "\n".join(found)


PLUGIN_PRIVATE = re.compile(r"^\s*(?:from|import)\s+tetrarch_(?:transport|rdma|alloc)_\w+\._[A-Za-z]\w*")


def test_core_tests_name_no_private_module_of_a_plugin() -> None:
    """Core's tests import a plugin through its public names (e.g. ``tetrarch_transport_nng.testing``):
    a plugin may reorganise its private modules without breaking another distribution's tests. (A
    factory string a test compares with a plugin's declaration is data, not an import.)"""
    files = list((ROOT / "tests").rglob("*.py"))
    found = [f"{p.relative_to(ROOT)}:{n}: {m.group()}" for p in files
             for n, line in enumerate(p.read_text().splitlines(), 1) if (m := PLUGIN_PRIVATE.search(line))]
    assert not found, "a plugin's private module named in core's tests:\n" + "\n".join(found)
