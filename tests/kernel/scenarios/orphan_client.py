"""Scenario: a client whose procs (and procs an actor spawned) must not outlive it.

Spawns 3 procs with sleeping actors and a ``Nester`` that spawns 2 procs of its own,
prints the pids of every process it started as one JSON line, then blocks reading
stdin until the test kills or stops it. Run by ``test_process_death.py``.
"""

from __future__ import annotations

import json
import sys

import psutil

from kernel_actors import Sleeper
from supervision_actors import Nester
from tetrarch import this_host
from tetrarch.testing import scaled


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    procs.spawn("s", Sleeper).sleep.broadcast(60)
    procs.slice(gpus=0).spawn("n", Nester).nest.call_one(2).get(timeout=scaled(60))
    print(json.dumps([p.pid for p in psutil.Process().children(recursive=True)]), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
