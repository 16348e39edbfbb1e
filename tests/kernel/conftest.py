"""Fixtures of the kernel tests: the client's fault hook. ``procs`` (one 4-proc mesh per module) and
the session-end shutdown are tests/conftest.py's."""

from __future__ import annotations

import os
import sys

import pytest

# The actor classes live in kernel_actors.py beside this file; procs import it too
# (tetrarch appends the client's sys.path to theirs).
sys.path.insert(0, os.path.dirname(__file__))

import tetrarch
from tetrarch import MeshFailure
from tetrarch.testing import Collector

#: Failures that reach the client's fault hook. Tests that kill actors on purpose
#: would otherwise end pytest through the default fault hook (exit code 1).
FAULTS: Collector[MeshFailure] = Collector("failures at the fault hook")
tetrarch.unhandled_fault_hook = FAULTS.add


@pytest.fixture
def faults() -> Collector[MeshFailure]:
    """The failures that reach the client's fault hook during one test (``faults.wait(n)``)."""
    FAULTS.clear()
    return FAULTS
