"""The template's allocator starts real host agent processes, each in its own scratch folder."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tetrarch.plugins import AgentCommand, AllocatorError, AllocRequest, ExitInfo
from tetrarch.testing import Collector, scaled
from tetrarch_plugin_template._allocator import SandboxAllocation, SandboxAllocator

pytestmark = pytest.mark.timeout(scaled(60))

STANDIN = Path(__file__).resolve().parent / "standin_agent.py"
SECRET = bytes(range(7, 39))


@pytest.mark.isolated  # the agents are fresh interpreters
def test_agents_run_in_their_own_folders_get_the_secret_by_file_and_stop(tmp_path: Path) -> None:
    hosts = 3
    for index in range(hosts):
        os.mkfifo(tmp_path / str(index))
    exits: Collector[tuple[int, ExitInfo]] = Collector("host agent exits")
    command = AgentCommand((sys.executable, str(STANDIN)), {"FIFO_DIR": str(tmp_path)}, secret=SECRET)
    allocation = SandboxAllocator().allocate(AllocRequest(hosts, command, name="test"),
                                             lambda index, info: exits.add((index, info)))
    assert isinstance(allocation, SandboxAllocation)
    try:
        for index in range(hosts):  # opening a FIFO blocks until its agent opened it
            said_index, secret, cwd = (tmp_path / str(index)).read_text().split(":", 2)
            assert (said_index, secret) == (str(index), SECRET.hex())
            assert Path(cwd) == allocation.folder(index).resolve()
            assert not list(allocation.folder(index).iterdir())  # the agent deleted the secret file
            with open(f"/proc/{allocation.agents[index].pid}/environ", "rb") as f:
                assert SECRET.hex().encode() not in f.read()
    finally:
        allocation.stop(grace=scaled(10.0))
    seen = dict(exits.wait(hosts, timeout=20))
    assert sorted(seen) == list(range(hosts))
    assert all(info.signal == signal.SIGTERM for info in seen.values())
    assert not allocation.root.exists()
    allocation.stop()  # idempotent


def test_an_agent_that_cannot_start_is_an_allocator_error_and_leaves_nothing(tmp_path: Path) -> None:
    command = AgentCommand((str(tmp_path / "no-such-agent"),), {}, secret=SECRET)
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("tetrarch-sandbox-missing-*"))
    with pytest.raises(AllocatorError, match="cannot start host agent 0 of 2"):
        SandboxAllocator().allocate(AllocRequest(2, command, name="missing"), lambda index, info: None)
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("tetrarch-sandbox-missing-*")) == before
