"""Scenario: calls in rounds on a mesh of 8 procs, then an ending that must print nothing but ours.

``python clean_exit.py stop|atexit ROUNDS``: ``stop`` stops the mesh and the host agents
(``shutdown_context``); ``atexit`` returns and leaves it to the exit hook. Exits are
where threads outlive what they use: a proc's heartbeat that redialed its owner while
nng's atexit finalized nng died of SIGFPE; an actor thread that ended after the transport
loop raised from a closed descriptor. Both printed to stderr only, and nothing failed.
Run by ``test_lifecycle.py``, on every transport.
"""

from __future__ import annotations

import sys

from tetrarch import Actor, endpoint, shutdown_context, this_host
from tetrarch.testing import scaled


class Noop(Actor):
    @endpoint
    def noop(self) -> None:
        return None


def main() -> None:
    how, rounds = sys.argv[1], int(sys.argv[2])
    procs = this_host().spawn_procs(per_host={"procs": 8})
    mesh = procs.spawn("noop", Noop)
    for _ in range(rounds):
        mesh.noop.call().get(timeout=scaled(30))
    if how == "stop":
        procs.stop().get(timeout=scaled(30))
        shutdown_context().get(timeout=scaled(30))
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
