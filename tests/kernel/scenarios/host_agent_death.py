"""Scenario: the host agent dies (SIGKILL) while calls to its procs are pending.

Prints ``ELAPSED <seconds>`` from the kill to the pending call's ``SupervisionError``,
the error, then ``AGAIN <values>`` from procs spawned afterwards (``this_host()``
replaces its dead host agent). With the argument ``exit`` it prints ``STOPPED <seconds>``
for stopping the dead procs and ``EXITING <timestamp>``, then leaves without cleaning up.
Run by ``test_process_death.py``.
"""

from __future__ import annotations

import sys
import time

import psutil

import tetrarch
from kernel_actors import Sleeper
from tetrarch import MeshFailure, SupervisionError, this_host
from tetrarch.testing import scaled


def main() -> None:
    faults: list[MeshFailure] = []
    tetrarch.unhandled_fault_hook = faults.append  # the deaths are expected: do not exit
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("s", Sleeper)
    mesh.sleep.call(0).get(timeout=scaled(30))
    pending = mesh.sleep.call(30)
    agent = next(c for c in psutil.Process().children()  # by its process title, or its module without one
                 if any(name in " ".join(c.cmdline()) for name in ("tetrarch host-agent", "_host_agent")))
    start = time.monotonic()
    agent.kill()
    try:
        pending.get(timeout=scaled(10))
    except SupervisionError as err:
        print("ELAPSED", round(time.monotonic() - start, 3))
        print(err)
    start = time.monotonic()
    procs.stop().get(timeout=scaled(20))
    print("STOPPED", round(time.monotonic() - start, 3))
    if sys.argv[1:] == ["exit"]:  # leave without stopping anything else: the exit path cleans up
        print("EXITING", time.time(), flush=True)
        return
    again = this_host().spawn_procs(per_host={"gpus": 1})
    print("AGAIN", again.spawn("again", Sleeper).sleep.call(0).get(timeout=scaled(10)).values())
    again.stop().get(timeout=scaled(20))


if __name__ == "__main__":
    main()
