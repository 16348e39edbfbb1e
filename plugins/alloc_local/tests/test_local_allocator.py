"""LocalAllocator: host agents as processes on this machine."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tetrarch._plugins import Registry
from tetrarch.plugins import AgentCommand, AllocatorError, AllocRequest, BackendKind, ExitInfo
from tetrarch_alloc_local import LocalAllocation, LocalAllocator

pytestmark = pytest.mark.timeout(60)

# A stand-in host agent: says which host it is through its own FIFO, then waits.
AGENT = """
import os, signal
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
index = os.environ["TETRARCH_HOST_INDEX"]
with open(os.path.join(os.environ["FIFO_DIR"], index), "w") as fifo:
    fifo.write(index + ":" + os.environ["SECRET"])
signal.pause()
"""


class Exits:
    """Collects ``on_exit(index, info)`` calls; ``wait(n)`` blocks until n arrived."""

    def __init__(self) -> None:
        self.seen: dict[int, ExitInfo] = {}
        self._cond = threading.Condition()

    def __call__(self, index: int, info: ExitInfo) -> None:
        with self._cond:
            self.seen[index] = info
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = 20.0) -> dict[int, ExitInfo]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.seen) >= count, timeout), self.seen
            return dict(self.seen)


def start_agents(tmp_path: Path, hosts: int, *, ignore_term: bool = False) -> tuple[LocalAllocation, Exits]:
    for index in range(hosts):
        os.mkfifo(tmp_path / str(index))
    env = {"FIFO_DIR": str(tmp_path), "SECRET": "s3cret", **({"IGNORE_TERM": "1"} if ignore_term else {})}
    exits = Exits()
    allocation = LocalAllocator().allocate(
        AllocRequest(hosts, AgentCommand((sys.executable, "-c", AGENT), env)), exits
    )
    for index in range(hosts):  # opening a FIFO blocks until the agent opened it
        assert (tmp_path / str(index)).read_text() == f"{index}:s3cret"
    return allocation, exits


def test_agents_get_their_index_and_env_and_stop(tmp_path: Path) -> None:
    allocation, exits = start_agents(tmp_path, 3)
    assert isinstance(allocation, LocalAllocation)
    assert len(set(allocation.pids)) == 3
    allocation.stop(grace=10.0)
    seen = exits.wait(3)
    assert sorted(seen) == [0, 1, 2]
    assert all(info.signal == signal.SIGTERM for info in seen.values())
    assert {info.pid for info in seen.values()} == set(allocation.pids)
    allocation.stop()  # idempotent


def test_stop_waits_one_grace_period_for_all_agents(tmp_path: Path) -> None:
    allocation, exits = start_agents(tmp_path, 4, ignore_term=True)
    started = time.monotonic()
    allocation.stop(grace=1.0)
    elapsed = time.monotonic() - started
    seen = exits.wait(4)
    assert all(info.signal == signal.SIGKILL for info in seen.values())
    assert 0.9 <= elapsed < 3.0, elapsed  # one after another would take at least 4 s


def test_exit_of_an_agent_is_reported_with_its_index(tmp_path: Path) -> None:
    allocation, exits = start_agents(tmp_path, 2)
    os.kill(allocation.pids[1], signal.SIGKILL)
    assert exits.wait(1) == {1: exits.seen[1]}
    assert exits.seen[1].describe() == "killed by SIGKILL"
    allocation.stop(grace=10.0)
    assert sorted(exits.wait(2)) == [0, 1]


def test_unstartable_agent_raises_allocator_error(tmp_path: Path) -> None:
    exits = Exits()
    request = AllocRequest(2, AgentCommand((str(tmp_path / "no-such-agent"),), {}))
    with pytest.raises(AllocatorError, match="cannot start host agent 0 of 2"):
        LocalAllocator().allocate(request, exits)
    with pytest.raises(AllocatorError, match="empty"):
        LocalAllocator().allocate(AllocRequest(1, AgentCommand((), {})), exits)
    with pytest.raises(ValueError, match="at least one host"):
        LocalAllocator().allocate(AllocRequest(0, AgentCommand(("true",), {})), exits)
    assert exits.seen == {}


def test_registry_creates_the_local_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETRARCH_ALLOCATOR", raising=False)
    monkeypatch.delenv("TETRARCH_DISABLE_PLUGINS", raising=False)
    registry = Registry()
    assert registry.select(BackendKind.ALLOCATOR).name == "local"
    allocator = registry.create(BackendKind.ALLOCATOR, "local")
    assert isinstance(allocator, LocalAllocator)
    assert allocator.spans_hosts is False and allocator.name == "local"
    assert registry.create(BackendKind.ALLOCATOR) is allocator
