"""A dead process fails pending and later calls with SupervisionError; nothing hangs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kernel_actors import Sleeper
from tetrarch import SupervisionError, this_host
from tetrarch.testing import scaled, still_running

pytestmark = pytest.mark.timeout(scaled(60))

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"

#: Documented: a pending call fails within milliseconds of its proc's death (0.5 s when
#: the host agent died too). The tests allow this much (nominal seconds, scaled).
CALL_FAILS_WITHIN_S = 2.0
#: Orphaned procs and host agents must be gone this soon (nominal seconds, scaled) after
#: their client was killed, or after its orphan timeout when it hangs.
ORPHANS_EXIT_WITHIN_S = 10.0


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV], ids=["SIGKILL", "SIGSEGV"])
def test_killed_proc_fails_pending_call_fast_and_others_keep_working(sig):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        mesh = procs.spawn("sleepers", Sleeper)
        pids = mesh.pid.call().get(timeout=scaled(30)).values()
        pending = mesh.slice(gpus=0).sleep.call_one(30)
        start = time.monotonic()
        os.kill(pids[0], sig)
        with pytest.raises(SupervisionError) as info:
            pending.get(timeout=scaled(10))
        assert time.monotonic() - start < scaled(CALL_FAILS_WITHIN_S)
        text = str(info.value)
        assert "sleepers.sleep" in text and "'gpus': 0/2" in text and signal.Signals(sig).name in text
        with pytest.raises(SupervisionError):  # later calls fail fast, without waiting
            mesh.slice(gpus=0).pid.call_one().get(timeout=scaled(1))
        assert mesh.slice(gpus=1).pid.call_one().get(timeout=scaled(10)) == pids[1]
    finally:
        procs.stop().get(timeout=scaled(30))
    again = this_host().spawn_procs(per_host={"gpus": 1})  # the host still serves
    try:
        assert again.spawn("again", Sleeper).sleep.call(0).get(timeout=scaled(10)).values() == [0]
    finally:
        again.stop().get(timeout=scaled(30))


#: Stopping procs known dead, or exiting the client after their host agent died, takes no
#: waiting for exit reports that cannot come (nominal seconds, scaled; it was 10-15 s).
STOP_DEAD_WITHIN_S = 3.0


@pytest.mark.isolated
def test_host_agent_death_fails_pending_calls(run_scenario):
    res = run_scenario(SCENARIOS / "host_agent_death.py", timeout=60, pythonpath=[HERE])
    assert res.returncode == 0, res.stderr
    elapsed = float(res.stdout.split("ELAPSED", 1)[1].split()[0])
    assert elapsed < scaled(CALL_FAILS_WITHIN_S) and "unreachable" in res.stdout
    assert float(res.stdout.split("STOPPED", 1)[1].split()[0]) < scaled(STOP_DEAD_WITHIN_S), res.stdout
    assert "AGAIN [0]" in res.stdout, res.stderr


@pytest.mark.isolated
def test_the_client_exits_promptly_after_its_host_agent_died(run_scenario):
    res = run_scenario(SCENARIOS / "host_agent_death.py", "exit", timeout=60, pythonpath=[HERE])
    ended = time.time()
    assert res.returncode == 0, res.stderr
    assert float(res.stdout.split("STOPPED", 1)[1].split()[0]) < scaled(STOP_DEAD_WITHIN_S), res.stdout
    exiting = float(res.stdout.split("EXITING", 1)[1].split()[0])
    assert ended - exiting < scaled(STOP_DEAD_WITHIN_S), f"the client took {ended - exiting:.1f} s to exit"


@pytest.mark.isolated
@pytest.mark.slow
# SIGSTOP: unanswered pings counted by each proc's own clock, whatever carries them; it
# takes ~30 s, so it runs once (SIGKILL, the dropped connections, runs per transport).
@pytest.mark.parametrize("how", ["SIGKILL", pytest.param("SIGSTOP", marks=pytest.mark.transport_independent)])
def test_dead_or_hung_client_leaves_no_orphans(start_scenario, how):
    """SIGKILL: connections drop at once. SIGSTOP: the client's sockets stay open but it
    answers no heartbeat, so procs and host agents give up after TETRARCH_ORPHAN_TIMEOUT.
    Both cover procs spawned by an actor (their owner is that actor's proc)."""
    # Short enough to keep the test quick; scaled so that a slow machine's late
    # heartbeats do not orphan the procs before the client is stopped.
    env = {"TETRARCH_ORPHAN_TIMEOUT": str(scaled(2)), "TETRARCH_HEARTBEAT_INTERVAL": str(scaled(0.5))}
    client = start_scenario(SCENARIOS / "orphan_client.py", env=env, pythonpath=[HERE],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    pids = json.loads(client.stdout.readline())
    assert len(pids) >= 6  # host agent + 3 procs + 2 procs spawned by an actor
    if how == "SIGKILL":
        client.kill()
        client.wait(scaled(10))
    else:
        client.send_signal(signal.SIGSTOP)
    alive = still_running(pids, scaled(ORPHANS_EXIT_WITHIN_S))  # zombies count as gone: a stopped client reaps none
    assert not alive, f"orphans outlived their {how} client: {alive}"
    # start_scenario kills the client (a stopped one too) at teardown
