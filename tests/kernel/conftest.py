"""Fixtures shared by the kernel tests: one 4-proc mesh per module (spawning costs ~0.3 s)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

# The actor classes live in kernel_actors.py beside this file; procs import it too
# (tetrarch appends the client's sys.path to theirs).
sys.path.insert(0, os.path.dirname(__file__))

import tetrarch
from tetrarch import MeshFailure, ProcMesh, shutdown_context, this_host
from tetrarch.testing import Collector, scaled

#: Failures that reach the client's fault hook. Tests that kill actors on purpose
#: would otherwise end pytest through the default fault hook (exit code 1).
FAULTS: Collector[MeshFailure] = Collector("failures at the fault hook")
tetrarch.unhandled_fault_hook = FAULTS.add


@pytest.fixture
def faults() -> Collector[MeshFailure]:
    """The failures that reach the client's fault hook during one test (``faults.wait(n)``)."""
    FAULTS.clear()
    return FAULTS


@pytest.fixture(scope="module")
def procs() -> Iterator[ProcMesh]:
    pm = this_host().spawn_procs(per_host={"gpus": 4})
    yield pm
    pm.stop().get(timeout=scaled(30))


@pytest.fixture(scope="session", autouse=True)
def _shutdown_tetrarch_at_session_end() -> Iterator[None]:
    """End host agents before the suite's leak check looks for stragglers."""
    yield
    shutdown_context().get(timeout=scaled(30))
