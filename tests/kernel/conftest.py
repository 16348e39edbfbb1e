"""Fixtures shared by the kernel tests: one 4-proc mesh per module (spawning costs ~0.3 s)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator

import pytest

# The actor classes live in kernel_actors.py beside this file; procs import it too
# (tetrarch appends the client's sys.path to theirs).
sys.path.insert(0, os.path.dirname(__file__))

import tetrarch
from tetrarch import MeshFailure, ProcMesh, shutdown_context, this_host

class FaultLog(list):
    """Failures that reached the client's fault hook; ``wait(n)`` blocks until there are n."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()

    def __call__(self, failure: MeshFailure) -> None:  # the hook
        with self._cond:
            self.append(failure)
            self._cond.notify_all()

    def wait(self, n: int, timeout: float = 10.0) -> list[MeshFailure]:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self) >= n, timeout):
                raise AssertionError(f"expected {n} failures at the fault hook within {timeout} s, got {list(self)}")
            return list(self)


#: Tests that kill actors on purpose would otherwise end pytest through the default
#: fault hook (exit code 1).
FAULTS = FaultLog()
tetrarch.unhandled_fault_hook = FAULTS


@pytest.fixture
def faults() -> FaultLog:
    """The failures that reach the client's fault hook during one test."""
    with FAULTS._cond:
        FAULTS.clear()
    return FAULTS


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
