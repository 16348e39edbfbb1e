"""Fixtures for the settings tests: no ``TETRARCH_*`` setting from the outer environment or from code."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tetrarch._config import SETTINGS, configure

# config_actors.py (beside this file) holds the actor the end-to-end test spawns; procs
# import it too (tetrarch appends the client's sys.path to theirs).
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def clean_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every setting at its default, before and after the test."""
    for setting in SETTINGS.values():
        monkeypatch.delenv(setting.env, raising=False)
    configure(**dict.fromkeys(SETTINGS))
    yield
    configure(**dict.fromkeys(SETTINGS))
