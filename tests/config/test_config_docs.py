"""docs/configuration.md carries the tables generated from the declarations, and no name is undeclared."""

from __future__ import annotations

import re
from pathlib import Path

from tetrarch._config import LAUNCH_VARS, known_settings
from tetrarch._config_doc import markdown_tables, update_markdown

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
REGENERATE = "python -m tetrarch._config_doc --update docs/configuration.md"


def test_the_document_has_the_generated_tables() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert markdown_tables() in text, f"docs/configuration.md is out of date; regenerate its tables with: {REGENERATE}"
    assert update_markdown(text) == text


def test_the_tables_list_every_setting_and_launch_variable() -> None:
    tables = markdown_tables()
    for setting in known_settings().values():  # core's, first-party plugins' and the test suite's
        assert f"| `{setting.key}` | `{setting.env}` |" in tables
    for var in LAUNCH_VARS.values():
        assert f"| `{var.name}` | {var.doc} |" in tables


def test_every_tetrarch_variable_in_the_sources_is_declared() -> None:
    """A new ``TETRARCH_*`` name in core or a plugin must become a setting or a launch variable."""
    declared = {s.env for s in known_settings().values()} | set(LAUNCH_VARS)  # plugins' declarations count
    per_dim = {name.removesuffix("<DIM>") for name in LAUNCH_VARS if name.endswith("<DIM>")}
    sources = [*ROOT.glob("core/src/**/*.py"), *ROOT.glob("plugins/*/src/**/*.py")]
    undeclared = set()
    for path in sources:
        for match in re.finditer(r"TETRARCH_[A-Z0-9_]*", path.read_text(encoding="utf-8")):
            name = match.group()
            placeholder = name.startswith("TETRARCH_FOO_")  # the example plugin "foo" of docstrings
            if name not in declared and not name.startswith(tuple(per_dim)) and name != "TETRARCH_" and not placeholder:
                undeclared.add(f"{name} ({path.relative_to(ROOT)})")
    assert not undeclared, (
        f"declare these in tetrarch/_config.py (SETTINGS or LAUNCH_VARS), or in their plugin's "
        f"tetrarch_settings hook: {sorted(undeclared)}")
