"""Scenario: the host's zygote becomes unusable; procs already forked and procs to come (fresh interpreter).

argv[1]: ``threads`` (a later mesh preloads a module that starts a thread in the zygote) or
``kill`` (the zygote is SIGKILLed). Prints one JSON line: the lineage of the procs of both
meshes and what became of the first mesh.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import psutil

import tetrarch
from tetrarch import SupervisionError, this_host
from tetrarch.testing import Collector, scaled

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from zygote_actors import Probe

faults: Collector = Collector("failures at the fault hook")
tetrarch.unhandled_fault_hook = faults.add


def main() -> int:
    how = sys.argv[1]
    first = this_host().spawn_procs(per_host={"procs": 2}, name="first")
    probes = first.spawn("p", Probe)
    before = list(probes.facts.call().get(timeout=scaled(30)).values())
    zygote = before[0]["ppid"]
    agent = psutil.Process(zygote).ppid()
    out: dict[str, object] = {"zygote": zygote, "agent": agent, "client": os.getpid(),
                              "first_parents": sorted({f["ppid"] for f in before})}
    if how == "kill":
        first_procs = [psutil.Process(f["pid"]) for f in before]
        os.kill(zygote, signal.SIGKILL)
        _gone, alive = psutil.wait_procs(first_procs, timeout=scaled(10))
        out["first_alive"] = [p.pid for p in alive]  # each got its parent-death signal
        try:
            probes.facts.call().get(timeout=scaled(30))
            out["first_after"] = "answered"
        except SupervisionError as exc:
            out["first_after"] = f"SupervisionError: {exc}"
        second = this_host().spawn_procs(per_host={"procs": 2}, name="second")
    else:
        second = this_host().spawn_procs(per_host={"procs": 2}, name="second", preload=["zygote_threads"])
    after = list(second.spawn("p", Probe).facts.call(["zygote_threads"]).get(timeout=scaled(30)).values())
    out["second_parents"] = sorted({f["ppid"] for f in after})
    out["second_imported_in"] = [f["imported_in"]["zygote_threads"] == f["pid"] for f in after]
    if how == "threads":
        out["first_after"] = [f["pid"] for f in probes.facts.call().get(timeout=scaled(30)).values()]
        out["first_pids"] = [f["pid"] for f in before]
    second.stop().get(timeout=scaled(30))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
