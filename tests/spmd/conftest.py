"""Fixtures of the SPMD tests: one 4-proc mesh per module (torch imports in ~1-2 s per proc)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

# spmd_helpers.py (callables, a -m module) lives beside this file; procs import it too
# (tetrarch appends the client's sys.path to theirs).
sys.path.insert(0, os.path.dirname(__file__))

from tetrarch import ProcMesh, shutdown_context, this_host
from tetrarch.testing import scaled


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
