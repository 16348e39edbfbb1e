"""The suite's workloads on an actor-mesh API: tetrarch's, and Monarch's ``monarch.actor`` (the same calls).

``run(this_host, workload, size, p)`` measures one workload (``_workloads.WORKLOADS``)
with the actors of ``bench_actors`` (built on the framework that
``TETRARCH_BENCH_FRAMEWORK`` names, which procs inherit). Figures: µs, calls/s,
s per round, s, GB/s as the registry says (times in seconds here; the runner scales).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from _timing import p50, payload_gbps, per_round, rate
from _workloads import split_size
from bench_actors import Noop, Sink


def _one(this_host: Callable[[], Any], cls: type, name: str) -> tuple[Any, Any]:
    procs = this_host().spawn_procs(per_host={"procs": 1})
    return procs, procs.spawn(name, cls)


def run(this_host: Callable[[], Any], workload: str, size: str, p: dict[str, Any]) -> float:
    """One figure of ``workload`` at ``size`` (see the module docstring)."""
    if workload == "spawn":
        t = time.perf_counter()
        procs = this_host().spawn_procs(per_host={"procs": int(size)})
        procs.spawn("noop", Noop).noop.call().get()
        figure = time.perf_counter() - t
    elif workload == "fanout":
        shape = split_size(size)
        procs = this_host().spawn_procs(per_host={"procs": shape[0]})
        noop = procs.spawn("noop", Noop).noop

        def batch(k: int) -> None:
            for f in [noop.call() for _ in range(k)]:
                f.get()

        figure = per_round(lambda: noop.call().get(), batch, shape, p)
    elif workload == "payload":
        procs, sink = _one(this_host, Sink, "sink")
        figure = payload_gbps(lambda data: sink.touched.call_one(data).get(), int(size), p)
    else:
        procs, actor = _one(this_host, Noop, "noop")
        noop = actor.noop
        if workload == "call":
            figure = p50(lambda: noop.call_one().get(), p["calls"], warmup=p["warmup"])
        elif workload == "pipelined":
            for _ in range(p["warmup"]):
                noop.call_one().get()

            def pipelined(n: int) -> None:
                for f in [noop.call_one() for _ in range(n)]:
                    f.get()

            figure = rate(pipelined, int(size))
        else:
            raise KeyError(workload)
    procs.stop().get()
    return figure
