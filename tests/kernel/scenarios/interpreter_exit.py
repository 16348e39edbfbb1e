"""Scenario: a client that exits without stopping anything it started.

Spawns 3 procs with an actor defined here (in ``__main__``), prints the pids of the
procs and of its host agent as one JSON list, and returns: the atexit hook must end
them all. Run by ``test_lifecycle.py``.
"""

from __future__ import annotations

import json
import os

import psutil

from tetrarch import Actor, endpoint, this_host
from tetrarch.testing import scaled


class Pid(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    pids = procs.spawn("pids", Pid).pid.call().get(timeout=scaled(30)).values()
    agents = [c.pid for c in psutil.Process().children()]
    print(json.dumps(pids + agents))
    # no stop(): the atexit hook must end procs and host agent


if __name__ == "__main__":
    main()
