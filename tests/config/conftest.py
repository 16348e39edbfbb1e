"""Fixtures for the settings tests: no ``TETRARCH_*`` setting from the outer environment or from code."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tetrarch._config import clear_runtime_config, known_settings

# config_actors.py (beside this file) holds the actor the end-to-end test spawns; procs
# import it too (tetrarch appends the client's sys.path to theirs).
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def clean_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every setting (plugins' too) at its default, before and after the test."""
    every = known_settings()  # core's, the installed plugins' and the test suite's
    for setting in every.values():
        monkeypatch.delenv(setting.env, raising=False)
    clear_runtime_config()
    yield
    clear_runtime_config()
