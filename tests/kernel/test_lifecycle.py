"""Process lifecycle seen from a fresh client: start failures, exit cleanup, backends."""

from __future__ import annotations

import json

import psutil
import pytest

pytestmark = [pytest.mark.timeout(90), pytest.mark.isolated]

_FAIL_SITE = """
import os, sys
if os.environ.get({var!r}) and not os.environ.get({unless!r}):
    sys.stderr.write("simulated broken environment: cannot import the ML stack\\n")
    sys.stderr.flush()
    os._exit(7)
"""


def _broken_site(tmp_path, var: str, unless: str = "NOPE_UNSET") -> dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(_FAIL_SITE.format(var=var, unless=unless))
    return {"PYTHONPATH": str(tmp_path)}


def test_proc_that_fails_to_start_reports_exit_code_and_stderr(run_isolated, tmp_path):
    # sitecustomize runs at interpreter start: procs (which carry TETRARCH_PROC_ID) die
    # with exit code 7 before they can report ready; the host agent is unaffected.
    res = run_isolated(
        """
        from tetrarch import this_host, ProcessStartError
        try:
            this_host().spawn_procs(per_host={"gpus": 2})
        except ProcessStartError as err:
            print("RC", err.returncode)
            print(err)
        """,
        timeout=60,
        env=_broken_site(tmp_path, "TETRARCH_PROC_ID"),
    )
    assert res.returncode == 0, res.stderr
    assert "RC 7" in res.stdout
    assert "exit code 7" in res.stdout and "simulated broken environment" in res.stdout


def test_host_agent_that_fails_to_start_reports_exit_code(run_isolated, tmp_path):
    res = run_isolated(
        """
        from tetrarch import this_host, ProcessStartError
        try:
            this_host().spawn_procs(per_host={"gpus": 1})
        except ProcessStartError as err:
            print(err)
        """,
        timeout=60,
        env=_broken_site(tmp_path, "TETRARCH_ALLOC_ID", unless="TETRARCH_PROC_ID"),
    )
    assert "host agent 0 failed to start (exit code 7)" in res.stdout, res.stdout + res.stderr
    assert "simulated broken environment" in res.stdout


def test_interpreter_exit_stops_everything_it_started(run_isolated):
    res = run_isolated(
        """
        import json, os
        import psutil
        from tetrarch import Actor, endpoint, this_host

        class Pid(Actor):
            @endpoint
            def pid(self) -> int:
                return os.getpid()

        procs = this_host().spawn_procs(per_host={"gpus": 3})
        pids = procs.spawn("pids", Pid).pid.call().get().values()
        agents = [c.pid for c in psutil.Process().children()]
        print(json.dumps(pids + agents))
        # no stop(): the atexit hook must end procs and host agent
        """,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    pids = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(pids) == 4
    _, alive = psutil.wait_procs([p for p in map(_proc, pids) if p is not None], timeout=10)
    assert not alive, f"still running after the client exited: {alive}"


def _proc(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def test_unknown_transport_lists_installed_ones_and_hint(run_isolated):
    res = run_isolated(
        """
        from tetrarch import this_host
        this_host().spawn_procs(per_host={"gpus": 1})
        """,
        timeout=30,
        env={"TETRARCH_TRANSPORT": "carrier-pigeon"},
    )
    assert res.returncode != 0
    assert "carrier-pigeon" in res.stderr and "ipc" in res.stderr and "tcp" in res.stderr


def test_tcp_transport_end_to_end(run_isolated):
    res = run_isolated(
        """
        from tetrarch import Actor, endpoint, this_host
        from tetrarch._runtime._root import get_root

        class Echo(Actor):
            @endpoint
            def echo(self, x):
                return x

        procs = this_host().spawn_procs(per_host={"gpus": 2})
        print(get_root().runtime.address)
        print(procs.spawn("e", Echo).echo.call(41).get().values())
        procs.stop().get()
        """,
        timeout=60,
        env={"TETRARCH_TRANSPORT": "tcp"},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("tcp://127.0.0.1:") and "[41, 41]" in res.stdout
