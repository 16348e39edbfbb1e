"""Scenario: a host mesh whose procs hold an actor blocked in ``__init__`` and an atexit
handler that blocks; ``HostMesh.shutdown()`` (or the client's exit) must still end it all.

``python stuck_shutdown.py shutdown|exit``: ``shutdown`` calls ``this_host().shutdown()`` and
prints ``SHUTDOWN <seconds>``; ``exit`` returns and leaves it to the exit hook. Both print
``PIDS <json list>`` first (the procs' pids). Run by ``test_stop_bounds.py`` with a short
``TETRARCH_STOP_TIMEOUT``.
"""

from __future__ import annotations

import json
import sys
import time

from stop_actors import BlockedInit, Exiter
from tetrarch import Channel, this_host
from tetrarch.testing import scaled


def main(how: str) -> None:
    host = this_host()
    procs = host.spawn_procs(per_host={"gpus": 2})
    port, receiver = Channel.open()
    procs.slice(gpus=0).spawn("stuck", BlockedInit, port)
    pids = [receiver.recv().get(timeout=scaled(10))]
    pids.append(procs.slice(gpus=1).spawn("exiter", Exiter).hang_at_exit.call_one().get(timeout=scaled(10)))
    print("PIDS", json.dumps(pids), flush=True)
    if how == "shutdown":
        start = time.monotonic()
        host.shutdown().get(timeout=scaled(60))
        print(f"SHUTDOWN {time.monotonic() - start:.2f}", flush=True)
    elif how != "exit":
        raise SystemExit(f"unknown ending {how!r}: expected 'shutdown' or 'exit'")


if __name__ == "__main__":
    main(sys.argv[1])
