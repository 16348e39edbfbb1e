"""The suite's workloads (``python -m benchmarks``): what each measures, its sizes and raw baselines.

Every framework (tetrarch, and with ``--peers`` Ray and Monarch) and every raw baseline
implements each workload in its own module, run in a fresh process per measurement
(``_suite_worker.py``); this registry is what they agree on. A figure is either a time
(lower is better) or a rate (higher is better).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RAW", "WORKLOADS", "Workload", "params", "split_size"]


@dataclass(frozen=True)
class Workload:
    """One workload of the suite."""

    name: str
    #: Sizes of a full run and of ``--quick`` (strings: ``"64x16"`` is 64 procs x 16 actors each).
    sizes: tuple[str, ...]
    quick_sizes: tuple[str, ...]
    unit: str
    higher_is_better: bool
    #: The raw baselines run next to it (:data:`RAW`); the first is the one ratios are taken against.
    baselines: tuple[str, ...]
    what: str


#: Raw baselines: no framework, the same workload with the plain library (``_raw_workloads.py``).
RAW: dict[str, str] = {
    "zmq": "pyzmq DEALER/ROUTER over ipc (one peer process per proc, K messages each for PxK; _baselines.Peer)",
    "pipe": "multiprocessing.Pipe to a forked echo process",
    "fork": "multiprocessing fork context: N processes started, each answers once over a Pipe",
    "forkserver": "the same with the forkserver context, cold (the server starts in the measure)",
    "unix": "the bytes over a plain AF_UNIX socket into a reused buffer, 1-byte ack (_baselines.Peer)",
    "memcpy": "numpy.copyto between two touched buffers in one process",
}

WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("call", ("1",), ("1",), "µs", False, ("zmq", "pipe"),
             "p50 of sequential call_one().get() to a no-op endpoint on one proc (after a warm-up)"),
    Workload("call_async", ("1",), ("1",), "µs", False, ("zmq", "pipe"),
             "call, to an async def no-op endpoint (it runs on the actor's event loop)"),
    Workload("pipelined", ("10000",), ("500",), "calls/s", True, ("zmq",),
             "N call_one() futures issued, then every get(); raw: at most 1000 messages in flight"),
    Workload("pipelined_async", ("10000",), ("500",), "calls/s", True, ("zmq",),
             "pipelined, to an async def no-op endpoint"),
    Workload("fanout", ("8", "32", "64x16"), ("2", "2x4"), "ms/round", False, ("zmq",),
             "broadcast+gather (call().get()) over P procs, p50 per round; PxK: K actor meshes on the P "
             "procs (P*K actors, as bench_scale.py), a round calls every mesh, then gets every reply"),
    Workload("spawn", ("4", "16", "64"), ("2",), "s", False, ("fork", "forkserver"),
             "cold, in a fresh client: spawn N procs and an actor on each, until all answered one call"),
    Workload("payload", ("1", "64"), ("1",), "GB/s", True, ("unix", "memcpy"),
             "a numpy uint8 argument of N MiB to an endpoint that reads every page of it; median of calls"),
)}


def params(quick: bool) -> dict[str, Any]:
    """Per-measurement counts every implementation uses (smaller with ``--quick``)."""
    if quick:
        return {"calls": 200, "warmup": 20, "rounds": 20, "payload_calls": 2}
    return {"calls": 2000, "warmup": 200, "rounds": 200, "payload_calls": 5}


def split_size(size: str) -> tuple[int, int]:
    """``"64x16"`` -> ``(64, 16)``; ``"8"`` -> ``(8, 1)``."""
    first, _, second = size.partition("x")
    return int(first), int(second or 1)
