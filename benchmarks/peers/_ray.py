"""The suite's workloads on Ray actors (runs in the peers' venv: ``ray==2.60.0``, no tetrarch).

A local Ray instance per measurement (``ray.init`` is not part of any figure; its
seconds are reported as ``init_s``), bound to 127.0.0.1, dashboard and usage stats off.
Actors ask for no CPU (``num_cpus=0``) so that 64 of them fit a 2-core machine, as
tetrarch's and Monarch's procs do.

* call: ``ray.get(actor.noop.remote())``; pipelined: N ``.remote()`` refs, then one ``ray.get``;
  ``*_async``: the same on an actor whose ``noop`` is ``async def`` (a Ray asyncio actor);
* fanout: P actors, ``ray.get([a.noop.remote() for a in actors])`` per round (Ray has no
  mesh broadcast: this is how a Ray program fans out); PxK (K actors per process) is n/a;
* spawn: P ``Noop.remote()`` until each answered one call (each actor starts a worker process
  of its own, none prestarted; ``ray.init`` before the clock starts, in a fresh instance);
* payload: a numpy argument (Ray puts it in its object store) to an actor that reads every page.
"""

from __future__ import annotations

import os
import time
from typing import Any

from _payloads import touch
from _timing import p50, payload_gbps, per_round, rate
from _workloads import split_size

EXTRA: dict[str, Any] = {}


def run(workload: str, size: str, p: dict[str, Any]) -> float:
    """One figure of ``workload`` at ``size`` on Ray (times in seconds)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report leaves the machine
    # Loopback only. ray.init(_node_ip_address="127.0.0.1") alone is not enough: Ray turns a
    # loopback address into "a remotely reachable IP" (services.resolve_ip_for_localhost), so its
    # GCS, raylet and workers listened on the machine's external address. With cluster mode off
    # (the switch Ray uses on macOS and Windows) the node address is 127.0.0.1 throughout.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    # No idle workers started ahead (by default ray.init starts one per CPU, which a spawn of
    # 2 actors then reuses): every actor's process starts in the measure, as procs do.
    os.environ.setdefault("RAY_enable_worker_prestart", "0")
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    import ray  # type: ignore[import-not-found]

    t = time.perf_counter()
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, logging_level="ERROR",
             log_to_driver=False, configure_logging=False)
    EXTRA["init_s"] = time.perf_counter() - t
    EXTRA["version"] = ray.__version__

    @ray.remote(num_cpus=0)
    class Noop:
        def noop(self) -> None:
            return None

    @ray.remote(num_cpus=0)
    class AsyncNoop:
        async def noop(self) -> None:
            return None

    @ray.remote(num_cpus=0)
    class Sink:
        def touched(self, data: Any) -> int:
            touch(data)
            return int(data.nbytes)

    try:
        if workload in ("spawn", "fanout"):
            shape = split_size(size)
            if shape[1] > 1:
                raise NotImplementedError(f"Ray runs each actor in a worker process of its own: {size} would be "
                                          f"{shape[0] * shape[1]} processes (no procs hosting several actors)")
            t = time.perf_counter()
            actors = [Noop.remote() for _ in range(shape[0])]  # type: ignore[attr-defined]
            ray.get([a.noop.remote() for a in actors])
            if workload == "spawn":
                return time.perf_counter() - t

            return per_round(lambda: ray.get([a.noop.remote() for a in actors]), p)
        if workload == "payload":
            sink = Sink.remote()  # type: ignore[attr-defined]
            return payload_gbps(lambda data: ray.get(sink.touched.remote(data)), int(size), p)
        actor = (AsyncNoop if workload.endswith("_async") else Noop).remote()  # type: ignore[attr-defined]
        workload = workload.removesuffix("_async")
        if workload == "call":
            return p50(lambda: ray.get(actor.noop.remote()), p["calls"], warmup=p["warmup"])
        if workload == "pipelined":
            for _ in range(p["warmup"]):
                ray.get(actor.noop.remote())
            return rate(lambda n: ray.get([actor.noop.remote() for _ in range(n)]), int(size))
        raise KeyError(workload)
    finally:
        ray.shutdown()
