"""Scenario: calls on a mesh of 8 procs, then an ending that must print nothing but ours.

``python clean_exit.py stop|atexit|killed ROUNDS``: after ROUNDS broadcast rounds on 8 procs and a
few 3 MiB echoes, ``stop`` stops the mesh and the host agents (``shutdown_context``) and
``atexit`` returns and leaves it to the exit hook; ``killed`` starts 3 MiB echoes on 3
procs, kills one and stops the mesh while the others still send their replies.

Exits are where threads outlive what they use. Each of these printed to stderr only, and
nothing failed:
- a proc's heartbeat that redialed its owner while nng's atexit finalized nng died of SIGFPE;
- an actor thread that ended after the transport loop raised from a closed descriptor;
- libzmq wrote a large reply from memory that pyzmq's atexit had freed and aborted
  ("Bad address").

Run by ``test_lifecycle.py``, on every transport.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

import tetrarch
from tetrarch import Actor, SupervisionError, endpoint, shutdown_context, this_host
from tetrarch.testing import scaled


class Noop(Actor):
    @endpoint
    def noop(self) -> None:
        return None

    @endpoint
    def echo(self, data: object) -> object:
        return data

    @endpoint
    def pid(self) -> int:
        return os.getpid()


def main() -> None:
    how, rounds = sys.argv[1], int(sys.argv[2])
    tetrarch.unhandled_fault_hook = lambda failure: None  # the killed proc's failure is expected
    big = np.ones(3 << 20, dtype=np.uint8)  # sent without a copy on zmq; numpy's pages go back to the OS
    if how == "killed":
        procs = this_host().spawn_procs(per_host={"procs": 3})
        mesh = procs.spawn("noop", Noop)
        pids = list(mesh.pid.call().get(timeout=scaled(30)).values())
        pending = [mesh.echo.call(big) for _ in range(10)]
        os.kill(pids[0], signal.SIGKILL)
        try:
            pending[-1].get(timeout=scaled(60))
        except SupervisionError:
            pass  # the others' replies may still be on their way: stop now
    else:
        procs = this_host().spawn_procs(per_host={"procs": 8})
        mesh = procs.spawn("noop", Noop)
        for _ in range(rounds):
            mesh.noop.call().get(timeout=scaled(30))
        for _ in range(3):
            mesh.echo.call(big).get(timeout=scaled(60))
    if how in ("stop", "killed"):
        procs.stop().get(timeout=scaled(60))
        shutdown_context().get(timeout=scaled(30))
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
