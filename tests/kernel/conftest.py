"""Fixtures shared by the kernel tests: one 4-proc mesh per module (spawning costs ~0.3 s)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

# The actor classes live in kernel_actors.py beside this file; procs import it too
# (tetrarch appends the client's sys.path to theirs).
sys.path.insert(0, os.path.dirname(__file__))

from tetrarch import ProcMesh, shutdown_context, this_host


@pytest.fixture(scope="module")
def procs() -> Iterator[ProcMesh]:
    pm = this_host().spawn_procs(per_host={"gpus": 4})
    yield pm
    pm.stop().get(timeout=30)


@pytest.fixture(scope="session", autouse=True)
def _shutdown_tetrarch_at_session_end() -> Iterator[None]:
    """End host agents before the suite's leak check looks for stragglers."""
    yield
    shutdown_context().get(timeout=30)
