"""The suite's workloads on an actor-mesh API: tetrarch's, and Monarch's ``monarch.actor`` (the same calls).

``run(this_host, workload, size, p)`` measures one workload (``_workloads.WORKLOADS``;
``*_async``: the same, to the ``async def`` endpoint) with the actors of ``bench_actors`` (built on the framework that
``TETRARCH_BENCH_FRAMEWORK`` names, which procs inherit). Times are in seconds (the
runner scales them to the registry's unit); rates in calls/s, payloads in GB/s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from _timing import p50, payload_gbps, per_round, rate
from _workloads import split_size
from bench_actors import AsyncNoop, Noop, Sink

MESH_WORKLOADS = ("call", "call_async", "pipelined", "pipelined_async", "fanout", "spawn", "payload")


def _measure(procs: Any, workload: str, size: str, p: dict[str, Any]) -> float:
    """``workload`` on ``procs`` (already spawned: one proc, or the fan-out's P)."""
    if workload == "payload":
        sink = procs.spawn("sink", Sink)
        return payload_gbps(lambda data: sink.touched.call_one(data).get(), int(size), p)
    if workload == "fanout":  # K actor meshes on the procs: a round calls each, then gets every reply
        meshes = [procs.spawn(f"noop{i}", Noop).noop for i in range(split_size(size)[1])]

        def round_trip() -> None:
            for f in [mesh.call() for mesh in meshes]:
                f.get()

        return per_round(round_trip, p)
    noop = procs.spawn("noop", AsyncNoop if workload.endswith("_async") else Noop).noop
    if workload in ("call", "call_async"):
        return p50(lambda: noop.call_one().get(), p["calls"], warmup=p["warmup"])
    for _ in range(p["warmup"]):
        noop.call_one().get()

    def pipelined(n: int) -> None:
        for f in [noop.call_one() for _ in range(n)]:
            f.get()

    return rate(pipelined, int(size))


def run(this_host: Callable[[], Any], workload: str, size: str, p: dict[str, Any]) -> float:
    """One figure of ``workload`` at ``size`` (see the module docstring); the procs stopped after."""
    if workload not in MESH_WORKLOADS:
        raise KeyError(f"no workload {workload!r}")
    t = time.perf_counter()
    procs = this_host().spawn_procs(per_host={"procs": split_size(size)[0] if workload in ("spawn", "fanout")
                                              else 1})
    try:
        if workload == "spawn":  # cold: the first this_host() and spawn_procs of this client count
            procs.spawn("noop", Noop).noop.call().get()
            return time.perf_counter() - t
        return _measure(procs, workload, size, p)
    finally:
        procs.stop().get()
