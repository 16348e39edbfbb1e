"""Scenario: which allocator starts the hosts, in a fresh client (the environment decides).

``python job_select.py this_host`` spawns one proc on ``this_host()``;
``python job_select.py job [ALLOCATOR]`` spawns one proc per host of
``AllocatorJob({"trainers": 2}, allocator=ALLOCATOR or None, options={"tag": "t1"})``
and kills the job. Either prints one JSON line: what the procs' environment says of
their allocator (``TEST_ALLOC_*``, set by the test's third-party allocator), or the
error raised and how many child processes the client had started by then.
"""

from __future__ import annotations

import json
import os
import sys

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # job_actors

from job_actors import Where
from tetrarch import HostMesh, TetrarchError, this_host
from tetrarch.job import AllocatorJob

_VARS = ("TEST_ALLOC_BY", "TEST_ALLOC_MESH", "TEST_ALLOC_TAG")


def _report(hosts: HostMesh) -> dict[str, object]:
    procs = hosts.spawn_procs(name="probe")
    where = procs.spawn("where", Where)
    out = {var: sorted({str(v) for v in where.env.call(var).get().values()}) for var in _VARS}
    procs.stop().get()
    return out


def main(mode: str, allocator: str | None) -> None:
    try:
        if mode == "this_host":
            out = _report(this_host())
        else:
            with AllocatorJob({"trainers": 2}, allocator=allocator, options={"tag": "t1"}) as job:
                out = _report(job.state().trainers)
            out["left"] = len(psutil.Process().children(recursive=True))
    except TetrarchError as exc:
        out = {"error": type(exc).__name__, "message": str(exc),
               "children": len(psutil.Process().children(recursive=True))}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
