"""Scenario: host meshes from the template's ``sandbox`` allocator through the public job API (a fresh client).

``AllocatorJob({"hosts": 2}, allocator="sandbox")`` starts two real host agents; one proc
per host calls an actor; ``kill()`` ends the job. Prints one JSON line: each proc's pid,
its host agent's pid and working directory, and what the client still had running
after ``kill()``. Run by ``test_plugin_sandbox_job.py`` with the template installed on
``PYTHONPATH``.
"""

from __future__ import annotations

import json

import psutil
from transport_actors import Where

from tetrarch.job import AllocatorJob


def main() -> None:
    job = AllocatorJob({"hosts": 2}, allocator="sandbox")
    hosts = job.state().hosts
    procs = hosts.spawn_procs(per_host={"gpus": 1}, name="sandboxed")
    where = procs.spawn("where", Where)
    reports = list(where.transport.call().get().values())
    echoes = list(where.echo.call("from a sandbox").get().values())
    agents = [{"pid": r["agent"], "cwd": psutil.Process(int(str(r["agent"]))).cwd()} for r in reports]
    job.kill()
    print(json.dumps({"procs": [r["pid"] for r in reports], "agents": agents, "echoes": echoes,
                      "left": [p.pid for p in psutil.Process().children(recursive=True)]}))


if __name__ == "__main__":
    main()
