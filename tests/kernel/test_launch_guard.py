"""Core's programs tie their life to their launcher themselves, so they start without a pre-exec step.

``spawn_watched`` used to run Python code between fork and exec in every child (the parent-death
signal and a process group): that needs a full fork of the launcher, about 14 ms for a client
holding torch, and is unsafe in a process with threads. Core's host agent and procs now start
with ``vfork`` and a process group from ``Popen`` and call ``die_with_launcher()`` first; any
other program (``srun``, a bootstrap wrapper) still gets the pre-exec step.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from secret_actors import EnvironReader
from tetrarch._config import ENV_LAUNCHER_PID
from tetrarch._runtime.plumbing._boot_cmd import PROC_MAIN
from tetrarch._runtime.plumbing._spawn import HOST_AGENT_MODULE, _guards_itself
from tetrarch.plugins.allocator import HOST_AGENT_MODULE as PUBLIC_HOST_AGENT_MODULE
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

SCENARIO = str(Path(__file__).resolve().parent / "scenarios" / "launch_guard.py")


@pytest.mark.transport_independent  # pure logic
@pytest.mark.skipif(sys.version_info < (3, 11), reason="Popen(process_group=) is Python 3.11's")
def test_only_core_programs_run_directly_skip_the_pre_exec_step() -> None:
    assert PUBLIC_HOST_AGENT_MODULE == HOST_AGENT_MODULE
    assert _guards_itself((sys.executable, "-m", HOST_AGENT_MODULE))
    assert _guards_itself((sys.executable, *PROC_MAIN))
    # The direct child must be that Python: a wrapper's own child would not be tied to us.
    assert not _guards_itself(("nsys", "profile", sys.executable, "-m", HOST_AGENT_MODULE))
    assert not _guards_itself((sys.executable, "-X", "dev", "-m", HOST_AGENT_MODULE))
    assert not _guards_itself(("srun", "--ntasks=2", "agent.sh"))
    assert not _guards_itself((sys.executable, "-m", "tetrarch"))


@pytest.mark.isolated  # a launcher of its own, killed
@pytest.mark.transport_independent  # a launcher and its child: no message between them
def test_a_child_started_without_the_pre_exec_step_dies_with_its_launcher(start_scenario) -> None:
    launcher = start_scenario(SCENARIO, "launcher", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # Two lines on the shared stdout: the launcher's (the child's pid) and the child's, once past its guard
    # (killed before it, the child would exit on finding its launcher gone: not what this tests).
    lines = {launcher.stdout.readline().strip(), launcher.stdout.readline().strip()}
    assert "-" in lines, lines
    child = psutil.Process(int((lines - {"-"}).pop()))
    try:
        assert child.ppid() == launcher.pid
        launcher.kill()
        launcher.wait(scaled(10))
        child.wait(scaled(10))  # psutil.TimeoutExpired: it outlived its launcher
    finally:
        if child.is_running():
            child.kill()


@pytest.mark.isolated  # runs children of its own
@pytest.mark.transport_independent  # a child alone: no message
def test_a_child_whose_launcher_is_gone_exits_at_once_and_no_descendant_inherits_the_variable() -> None:
    def run(launcher_pid: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, SCENARIO, "child"], env={**os.environ, ENV_LAUNCHER_PID.name:
                              str(launcher_pid)}, input="", capture_output=True, text=True, timeout=scaled(30))

    gone = run(1)  # its parent is this test, not pid 1: as if reparented after its launcher died
    assert (gone.returncode, gone.stdout) == (0, ""), gone.stderr
    alive = run(os.getpid())
    assert (alive.returncode, alive.stdout) == (0, "-\n"), alive.stderr


def test_host_agents_and_procs_keep_nothing_of_the_variable(procs) -> None:
    agents = [p for p in psutil.Process().children(recursive=True) if "host-agent" in " ".join(p.cmdline())]
    assert agents, "the shared mesh has a host agent"
    for agent in agents:
        with open(f"/proc/{agent.pid}/environ", "rb") as f:  # the kernel's copy: what it started with
            assert f"{ENV_LAUNCHER_PID.name}={os.getpid()}".encode() in f.read().split(b"\0")
    reader = procs.spawn("launcher_environ", EnvironReader)
    try:
        for environ in reader.environ.call().get(timeout=scaled(30)).values():
            assert ENV_LAUNCHER_PID.name not in environ
    finally:
        reader.stop().get(timeout=scaled(30))
