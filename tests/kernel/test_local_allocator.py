"""LocalAllocator (the ``local`` allocator, from the ``tetrarch-alloc-local`` plugin that core depends on):
host agents as processes on this machine."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tetrarch._plugins import Registry, _registry
from tetrarch._runtime.meshes._host_alloc import this_host_allocator
from tetrarch.plugins import AgentCommand, AllocatorError, AllocRequest, BackendKind, BackendUnavailable, ExitInfo
from tetrarch.plugins.allocator import LocalAllocation, LocalAllocator
from tetrarch.testing import Collector, scaled

# Host agent processes and signals, no calls (run once, not per transport).
pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(60))]

#: A stand-in host agent: says which host it is through its own FIFO, then waits.
FAKE_AGENT = Path(__file__).resolve().parent / "fake_agent.py"

Exits = Collector[tuple[int, ExitInfo]]


def collect_exits() -> tuple[Exits, Callable[[int, ExitInfo], None]]:
    """A collector of ``on_exit(index, info)`` calls and the callback that feeds it."""
    exits: Exits = Collector("host agent exits")
    return exits, lambda index, info: exits.add((index, info))


#: The allocation's secret the fake agents are given (and echo back).
SECRET = bytes(range(100, 132))


def start_agents(tmp_path: Path, hosts: int, *, ignore_term: bool = False) -> tuple[LocalAllocation, Exits]:
    for index in range(hosts):
        os.mkfifo(tmp_path / str(index))
    env = {"FIFO_DIR": str(tmp_path), **({"IGNORE_TERM": "1"} if ignore_term else {})}
    exits, on_exit = collect_exits()
    allocation = LocalAllocator().allocate(
        AllocRequest(hosts, AgentCommand((sys.executable, str(FAKE_AGENT)), env, secret=SECRET)), on_exit
    )
    for index in range(hosts):  # opening a FIFO blocks until the agent opened it
        assert (tmp_path / str(index)).read_text() == f"{index}:{SECRET.hex()}"
    return allocation, exits


@pytest.mark.isolated  # the fake agents are fresh interpreters
def test_agents_get_their_index_and_env_and_stop(tmp_path: Path) -> None:
    allocation, exits = start_agents(tmp_path, 3)
    assert isinstance(allocation, LocalAllocation)
    assert len(set(allocation.pids)) == 3
    allocation.stop(grace=scaled(10.0))
    seen = dict(exits.wait(3, timeout=20))
    assert sorted(seen) == [0, 1, 2]
    assert all(info.signal == signal.SIGTERM for info in seen.values())
    assert {info.pid for info in seen.values()} == set(allocation.pids)
    allocation.stop()  # idempotent


@pytest.mark.isolated  # the fake agents are fresh interpreters
def test_the_secret_reaches_each_agent_through_a_pipe_not_its_environment(tmp_path: Path) -> None:
    """The kernel keeps a process's initial environment in /proc/PID/environ: the secret must not be there."""
    allocation, _exits = start_agents(tmp_path, 2)
    try:
        for pid in allocation.pids:
            agent = psutil.Process(pid)
            with open(f"/proc/{pid}/environ", "rb") as f:
                raw = f.read()
            assert SECRET.hex().encode() not in raw and SECRET not in raw
            assert b"TETRARCH_SECRET_FD=" in raw
            assert not any(SECRET.hex() in value for value in agent.environ().values())
            assert SECRET.hex() not in " ".join(agent.cmdline())
    finally:
        allocation.stop(grace=scaled(10.0))


@pytest.mark.isolated  # the fake agents are fresh interpreters
def test_stop_waits_one_grace_period_for_all_agents(tmp_path: Path) -> None:
    allocation, exits = start_agents(tmp_path, 4, ignore_term=True)
    grace = scaled(1.0)  # a longer grace on a slow machine leaves more room for the kills
    started = time.monotonic()
    allocation.stop(grace=grace)
    elapsed = time.monotonic() - started
    seen = dict(exits.wait(4, timeout=20))
    assert all(info.signal == signal.SIGKILL for info in seen.values())
    assert 0.9 * grace <= elapsed < 3 * grace, elapsed  # one after another would take at least 4 graces


@pytest.mark.isolated  # the fake agents are fresh interpreters
def test_exit_of_an_agent_is_reported_with_its_index(tmp_path: Path) -> None:
    allocation, exits = start_agents(tmp_path, 2)
    os.kill(allocation.pids[1], signal.SIGKILL)
    ((index, info),) = exits.wait(1, timeout=20)
    assert index == 1
    assert info.describe() == "killed by SIGKILL"
    allocation.stop(grace=scaled(10.0))
    assert sorted(dict(exits.wait(2, timeout=20))) == [0, 1]


def test_unstartable_agent_raises_allocator_error(tmp_path: Path) -> None:
    exits, on_exit = collect_exits()
    request = AllocRequest(2, AgentCommand((str(tmp_path / "no-such-agent"),), {}))
    with pytest.raises(AllocatorError, match="cannot start host agent 0 of 2"):
        LocalAllocator().allocate(request, on_exit)
    with pytest.raises(AllocatorError, match="empty"):
        LocalAllocator().allocate(AllocRequest(1, AgentCommand((), {})), on_exit)
    with pytest.raises(ValueError, match="at least one host"):
        LocalAllocator().allocate(AllocRequest(0, AgentCommand(("true",), {})), on_exit)
    assert exits.items == []


def test_registry_creates_the_local_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin core depends on provides it, through its entry point."""
    monkeypatch.delenv("TETRARCH_ALLOCATOR", raising=False)
    monkeypatch.delenv("TETRARCH_DISABLE_PLUGINS", raising=False)
    registry = Registry()
    (row,) = [r for r in registry.statuses(BackendKind.ALLOCATOR) if r.name == "local"]
    assert row.distribution == "tetrarch-alloc-local"
    assert row.spec is not None and row.spec.factory == "tetrarch_alloc_local._local:LocalAllocator"
    assert registry.select(BackendKind.ALLOCATOR, request={"require": {"same-host"}}).name == "local"
    allocator = registry.create(BackendKind.ALLOCATOR, "local")
    assert isinstance(allocator, LocalAllocator)
    assert allocator.spans_hosts is False and allocator.name == "local"
    assert registry.create(BackendKind.ALLOCATOR) is allocator


def test_without_the_plugin_this_host_names_its_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Core alone (tetrarch-alloc-local uninstalled, or tetrarch installed with --no-deps) has no allocator."""
    monkeypatch.delenv("TETRARCH_ALLOCATOR", raising=False)
    monkeypatch.setattr(_registry, "_registry", Registry(entry_points=False))
    with pytest.raises(BackendUnavailable) as info:
        this_host_allocator()
    message = str(info.value)
    assert message.startswith("this_host() starts its host agent with the 'local' allocator, but "
                              "tetrarch-alloc-local is not installed"), message
    assert "pip install tetrarch-alloc-local" in message, message
    monkeypatch.setenv("TETRARCH_ALLOCATOR", "local")  # chosen by name: the registry's hint says the same
    with pytest.raises(LookupError, match=r"'local' comes with tetrarch-alloc-local: pip install tetrarch-alloc-local"):
        this_host_allocator()
