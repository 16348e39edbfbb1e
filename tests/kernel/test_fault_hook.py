"""Unhandled failures reach ``tetrarch.unhandled_fault_hook`` on the client (fresh clients)."""

from __future__ import annotations

import os

import pytest

pytestmark = [pytest.mark.isolated, pytest.mark.timeout(60)]

_ENV = {"PYTHONPATH": os.path.dirname(__file__)}

# A client whose actor fails by broadcast while the main thread waits on a future that
# never completes on its own: the fault must end the client anyway.
_SCENARIO = """
import atexit, sys, threading
import tetrarch
from tetrarch import this_host, Channel
from supervision_actors import Fragile
{hook}
atexit.register(lambda: print("ATEXIT RAN", flush=True))
procs = this_host().spawn_procs(per_host={{"gpus": 2}})
mesh = procs.spawn("doomed", Fragile)
mesh.ok.call().get(timeout=10)
mesh.slice(gpus=1).raise_exc.broadcast()
_port, receiver = Channel.open()
try:
    receiver.recv().get(timeout={wait})
    print("MAIN WOKE WITHOUT A MESSAGE")
except TimeoutError:
    print("MAIN TIMED OUT")
finally:
    print("FINALLY RAN", flush=True)
"""


def test_default_hook_prints_the_report_and_exits_1_running_atexit(run_isolated):
    res = run_isolated(_SCENARIO.format(hook="", wait=30), 60, env=_ENV)
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert "unhandled failure reached the client" in res.stderr
    assert "MeshFailure on mesh 'doomed', rank 1" in res.stderr
    assert "root event: doomed{'gpus': 1/2}" in res.stderr and "plain exception" in res.stderr
    assert "FINALLY RAN" in res.stdout and "ATEXIT RAN" in res.stdout
    assert "MAIN" not in res.stdout  # the wait was interrupted, not finished


def test_a_raising_hook_is_called_once_and_ends_the_client_with_1(run_isolated):
    hook = ("calls = []\n"
            "def hook(failure):\n"
            "    calls.append(failure)\n"
            "    print('HOOK CALLED', len(calls), flush=True)\n"
            "    raise RuntimeError('hook raised on purpose')\n"
            "tetrarch.unhandled_fault_hook = hook\n")
    res = run_isolated(_SCENARIO.format(hook=hook, wait=30), 60, env=_ENV)
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert res.stdout.count("HOOK CALLED") == 1
    assert "hook raised on purpose" in res.stderr and "MeshFailure on mesh 'doomed'" in res.stderr
    assert "ATEXIT RAN" in res.stdout


def test_a_replaced_hook_that_returns_keeps_the_client_running(run_isolated):
    res = run_isolated("""
import threading
import tetrarch
from tetrarch import this_host
from supervision_actors import Fragile
seen, arrived = [], threading.Event()
tetrarch.unhandled_fault_hook = lambda f: (seen.append(f), arrived.set())
procs = this_host().spawn_procs(per_host={"gpus": 2})
mesh = procs.spawn("doomed", Fragile)
mesh.slice(gpus=1).raise_exc.broadcast()
assert arrived.wait(30), "no failure reached the hook"
print("SEEN", seen[0])
print("STILL RUNNING", mesh.slice(gpus=0).ok.call_one().get(timeout=10))
procs.stop().get(timeout=30)
""", 60, env=_ENV)
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    assert "SEEN MeshFailure(mesh='doomed', crashed_ranks=[1]" in res.stdout
    assert "STILL RUNNING alive" in res.stdout
