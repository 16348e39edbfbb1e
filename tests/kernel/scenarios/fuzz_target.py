"""Scenario: a client with one proc that a fuzz test attacks; the client makes real calls on request.

Run with ``TETRARCH_TRANSPORT`` naming the transport under test (the proc gets its
spawner's transport). Prints one JSON line, ``{"address", "pid", "transport"}``: the
proc's listening address (where its actors are reached), its pid and the client's
transport. Then serves one command per line on stdin, answering one line each:

* ``call N``: calls ``echo(N)`` on the proc's actor; answers ``ok N`` or ``error ...``;
* ``faults``: answers ``faults K``, the failures that reached the fault hook so far.

At the end of stdin it stops the proc mesh and exits 0.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # kernel_actors

import tetrarch
from kernel_actors import Info
from tetrarch import MeshFailure, TetrarchError, this_host
from tetrarch._runtime.process._root import get_root

FAULTS: list[MeshFailure] = []
CALL_TIMEOUT_S = 30.0


def _answer(command: str, info: Info) -> str:
    verb, _, arg = command.partition(" ")
    if verb == "call":
        try:
            got = info.echo.call_one(int(arg)).get(timeout=CALL_TIMEOUT_S)
        except (TetrarchError, TimeoutError) as exc:  # reported to the test, which fails on it
            return f"error {type(exc).__name__}: {exc}".replace("\n", " ")
        return f"ok {got}"
    if verb == "faults":
        return f"faults {len(FAULTS)}"
    return f"error unknown command {command!r}"


def main() -> None:
    tetrarch.unhandled_fault_hook = FAULTS.append
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="fuzzed")
    info = procs.spawn("fuzzed_info", Info)
    pid = info.pid.call_one().get(timeout=CALL_TIMEOUT_S)
    print(json.dumps({"address": info._ids[0][0], "pid": pid, "transport": get_root().transport_name}), flush=True)
    for line in sys.stdin:
        print(_answer(line.strip(), info), flush=True)
    procs.stop().get(timeout=CALL_TIMEOUT_S)


if __name__ == "__main__":
    main()
