"""A dead process fails pending and later calls with SupervisionError; nothing hangs."""

from __future__ import annotations

import os
import signal
import time

import pytest
from kernel_actors import Sleeper

from tetrarch import SupervisionError, this_host

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV], ids=["SIGKILL", "SIGSEGV"])
def test_killed_proc_fails_pending_call_fast_and_others_keep_working(sig):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        mesh = procs.spawn("sleepers", Sleeper)
        pids = mesh.pid.call().get().values()
        pending = mesh.slice(gpus=0).sleep.call_one(30)
        start = time.monotonic()
        os.kill(pids[0], sig)
        with pytest.raises(SupervisionError) as info:
            pending.get(timeout=10)
        assert time.monotonic() - start < 2.0
        text = str(info.value)
        assert "sleepers.sleep" in text and "'gpus': 0/2" in text and signal.Signals(sig).name in text
        with pytest.raises(SupervisionError):  # later calls fail fast, without waiting
            mesh.slice(gpus=0).pid.call_one().get(timeout=1)
        assert mesh.slice(gpus=1).pid.call_one().get(timeout=10) == pids[1]
    finally:
        procs.stop().get(timeout=30)
    again = this_host().spawn_procs(per_host={"gpus": 1})  # the host still serves
    try:
        assert again.spawn("again", Sleeper).sleep.call(0).get(timeout=10).values() == [0]
    finally:
        again.stop().get(timeout=30)


@pytest.mark.isolated
def test_host_agent_death_fails_pending_calls(run_isolated):
    res = run_isolated(
        """
        import time, psutil
        import tetrarch
        from tetrarch import this_host, SupervisionError
        from kernel_actors import Sleeper
        faults = []
        tetrarch.unhandled_fault_hook = faults.append
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        mesh = procs.spawn("s", Sleeper)
        mesh.sleep.call(0).get()
        pending = mesh.sleep.call(30)
        agent = [c for c in psutil.Process().children() if "_host_agent" in " ".join(c.cmdline())][0]
        start = time.monotonic()
        agent.kill()
        try:
            pending.get(timeout=10)
        except SupervisionError as err:
            print("ELAPSED", round(time.monotonic() - start, 3))
            print(err)
        procs.stop().get(timeout=20)
        # this_host() replaces its dead host agent: new procs can be spawned.
        again = this_host().spawn_procs(per_host={"gpus": 1})
        print("AGAIN", again.spawn("again", Sleeper).sleep.call(0).get(timeout=10).values())
        again.stop().get(timeout=20)
        """,
        timeout=60,
        env={"PYTHONPATH": os.path.dirname(__file__)},
    )
    assert res.returncode == 0, res.stderr
    elapsed = float(res.stdout.split("ELAPSED", 1)[1].split()[0])
    assert elapsed < 2.0 and "unreachable" in res.stdout
    assert "AGAIN [0]" in res.stdout, res.stderr


@pytest.mark.isolated
@pytest.mark.parametrize("how", ["SIGKILL", "SIGSTOP"])
def test_dead_or_hung_client_leaves_no_orphans(tmp_path, how):
    """SIGKILL: connections drop at once. SIGSTOP: the client's sockets stay open but it
    answers no heartbeat, so procs and host agents give up after TETRARCH_ORPHAN_TIMEOUT.
    Both cover procs spawned by an actor (their owner is that actor's proc)."""
    import subprocess
    import sys

    import psutil

    script = tmp_path / "client.py"
    script.write_text(
        "import json, sys, psutil\n"
        "from tetrarch import this_host\n"
        "from kernel_actors import Sleeper\n"
        "from supervision_actors import Nester\n"
        "procs = this_host().spawn_procs(per_host={'gpus': 3})\n"
        "procs.spawn('s', Sleeper).sleep.broadcast(60)\n"
        "procs.slice(gpus=0).spawn('n', Nester).nest.call_one(2).get(timeout=60)\n"
        "print(json.dumps([p.pid for p in psutil.Process().children(recursive=True)]), flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = dict(os.environ, PYTHONPATH=os.path.dirname(__file__), TETRARCH_ORPHAN_TIMEOUT="2",
               TETRARCH_HEARTBEAT_INTERVAL="0.5")
    client = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env=env, text=True)
    try:
        import json

        pids = json.loads(client.stdout.readline())
        assert len(pids) >= 6  # host agent + 3 procs + 2 procs spawned by an actor
        if how == "SIGKILL":
            client.kill()
            client.wait(10)
        else:
            client.send_signal(signal.SIGSTOP)
        procs = []
        for pid in pids:
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=10)
        alive = [p for p in alive if _status(p) not in (psutil.STATUS_ZOMBIE, None)]  # a stopped client reaps none
        assert not alive, f"orphans outlived their {how} client: {alive}"
    finally:
        client.kill()  # also ends a stopped client
        client.wait(10)


def _status(proc) -> str | None:
    import psutil

    try:
        return proc.status()
    except psutil.NoSuchProcess:
        return None
