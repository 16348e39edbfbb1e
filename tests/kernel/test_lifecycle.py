"""Process lifecycle seen from a fresh client: start failures, exit cleanup, backends."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from tetrarch.testing import scaled

pytestmark = [pytest.mark.timeout(scaled(90)), pytest.mark.isolated]

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"
#: A ``sitecustomize`` that makes chosen processes exit with code 7 at interpreter start.
BROKEN_SITE = SCENARIOS / "broken_site"


def _broken(break_if: str, unless: str | None = None) -> dict[str, str]:
    """Environment for processes that carry ``break_if`` (and not ``unless``) to fail at start."""
    return {"TETRARCH_TEST_BREAK_IF": break_if, **({"TETRARCH_TEST_BREAK_UNLESS": unless} if unless else {})}


def test_proc_that_fails_to_start_reports_exit_code_and_stderr(run_scenario):
    # sitecustomize runs at interpreter start: procs (which carry TETRARCH_PROC_ID) die
    # with exit code 7 before they can report ready; the host agent is unaffected. Only a
    # fresh interpreter starts that way (a forked proc's start is test_zygote.py's).
    res = run_scenario(SCENARIOS / "spawn_procs.py", "2", timeout=60,
                       env={**_broken("TETRARCH_PROC_ID"), "TETRARCH_FORK_PROCS": "0"}, pythonpath=[BROKEN_SITE])
    assert res.returncode == 0, res.stderr
    assert "RC 7" in res.stdout
    assert "exit code 7" in res.stdout and "simulated broken environment" in res.stdout


@pytest.mark.transport_independent  # the agent dies before it connects
def test_host_agent_that_fails_to_start_reports_exit_code(run_scenario):
    res = run_scenario(SCENARIOS / "spawn_procs.py", "1", timeout=60,
                       env=_broken("TETRARCH_ALLOC_ID", unless="TETRARCH_PROC_ID"), pythonpath=[BROKEN_SITE])
    assert "host agent 0 failed to start (exit code 7)" in res.stdout, res.stdout + res.stderr
    assert "simulated broken environment" in res.stdout


def test_interpreter_exit_stops_everything_it_started(run_scenario):
    res = run_scenario(SCENARIOS / "interpreter_exit.py", timeout=60)
    assert res.returncode == 0, res.stderr
    pids = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(pids) == 4
    _, alive = psutil.wait_procs([p for p in map(_proc, pids) if p is not None], timeout=scaled(10))
    assert not alive, f"still running after the client exited: {alive}"


#: What stderr shows when some thread of the client or of a proc failed unseen, or a process crashed.
_NOT_CLEAN = ("Traceback", "Fatal Python error", "Exception in thread", "Exception ignored")


@pytest.mark.parametrize("how", ["stop", "atexit", "killed"])
def test_ending_prints_no_error_of_any_process(run_scenario, how):
    """Stopping a mesh that was just busy (or leaving it to the exit hook, or stopping it while
    its procs still send large replies) ends every thread of the client and of its procs
    quietly: no traceback, no crash (``Fatal Python error``)."""
    res = run_scenario(SCENARIOS / "clean_exit.py", how, "150", timeout=90)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "DONE" in res.stdout
    bad = [line for line in res.stderr.splitlines() if any(mark in line for mark in _NOT_CLEAN)]
    assert not bad, res.stderr[-5000:]


def test_a_stopped_mesh_reports_no_lost_owner(run_scenario):
    """A proc (or host agent) that is being stopped does not mistake its own closing for a
    lost owner: with a ping every 10 ms, some ping fails while the process closes its
    transport, and nothing may print "exiting: its owner ... is unreachable"."""
    res = run_scenario(SCENARIOS / "clean_exit.py", "stop", "20", timeout=90,
                       env={"TETRARCH_HEARTBEAT_INTERVAL": "0.01"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "DONE" in res.stdout
    lost = [line for line in res.stderr.splitlines() if "exiting:" in line]
    assert not lost, res.stderr[-5000:]


def _proc(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


@pytest.mark.transport_independent  # pins a transport that does not exist
def test_unknown_transport_lists_installed_ones_and_hint(run_scenario):
    res = run_scenario(SCENARIOS / "spawn_procs.py", "1", timeout=30, env={"TETRARCH_TRANSPORT": "carrier-pigeon"})
    assert res.returncode != 0
    assert "carrier-pigeon" in res.stderr and "ipc" in res.stderr and "tcp" in res.stderr


# A -c snippet for now, not a scenario module: its program imports a private runtime
# module whose name is about to change.
@pytest.mark.transport_independent  # pins tcp itself
def test_tcp_transport_end_to_end(run_isolated):
    res = run_isolated(
        """
        from tetrarch import Actor, endpoint, this_host
        from tetrarch._runtime.process._root import get_root

        class Echo(Actor):
            @endpoint
            def echo(self, x):
                return x

        procs = this_host().spawn_procs(per_host={"gpus": 2})
        print(get_root().router.address)
        print(procs.spawn("e", Echo).echo.call(41).get().values())
        procs.stop().get()
        """,
        timeout=60,
        env={"TETRARCH_TRANSPORT": "tcp"},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("tcp://127.0.0.1:") and "[41, 41]" in res.stdout
