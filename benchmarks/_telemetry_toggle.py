"""What ``bench_telemetry.py``'s clients run: one measurement of a mesh, and (``--paired``) switching one
process's per-call telemetry on and off while it runs.

Benchmark-only: it sets tetrarch's private switches, the ones the call path reads. The process
must have started with metrics on and tracing sampled (``TETRARCH_METRICS=1``,
``TETRARCH_TRACE_SAMPLE`` above 0), so that the exporter and the span subscribers exist; what
runs on a timer (the metric exporter, the span store's flush) keeps running in every mode, and
so is not part of the difference this measures.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any


def measure(mesh: Any, calls: int, pipelined: int) -> dict[str, float]:
    """Sequential ``call_one().get()`` p50 (s), then ``pipelined`` calls in flight at once: calls/s and the CPU
    seconds per call of this process and of the actor's (``Noop.cpu_seconds``)."""
    block = _block(mesh, calls, pipelined)
    return {"p50": statistics.median(block["times"]), "rate": pipelined / block["seconds"],
            "cpu": block["cpu"] / pipelined, "actor_cpu": block["actor_cpu"] / pipelined}


def interleaved(mesh: Any, modes: dict[str, tuple[bool, float]], rounds: int, calls: int,
                pipelined: int) -> dict[str, list[dict[str, Any]]]:
    """``rounds`` rounds, each switching this client and ``mesh``'s actor through every mode of ``modes``
    (``name: (metrics, trace sample)``; the order turns by one each round) and measuring a block in each
    (:func:`_block`): per mode, one block per round. Short blocks, taken turn about, see the same machine."""
    names = list(modes)
    out: dict[str, list[dict[str, Any]]] = {m: [] for m in names}
    for i in range(rounds):
        for mode in names[i % len(names):] + names[:i % len(names)]:
            toggle(*modes[mode])
            mesh.telemetry.call_one(*modes[mode]).get()
            for _ in range(20):
                mesh.noop.call_one().get()
            out[mode].append(_block(mesh, calls, pipelined))
    return out


def _block(mesh: Any, calls: int, pipelined: int) -> dict[str, Any]:
    """``calls`` sequential calls (``times``: each one's seconds), then ``pipelined`` calls in flight at once
    (``seconds`` until the last answered; ``cpu`` and ``actor_cpu``: the CPU seconds of this process and of the
    actor's meanwhile)."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        mesh.noop.call_one().get()
        times.append(time.perf_counter() - t0)
    a0 = mesh.cpu_seconds.call_one().get()
    t0, c0 = time.perf_counter(), time.process_time()
    futures = [mesh.noop.call_one() for _ in range(pipelined)]
    for f in futures:
        f.get()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    del futures
    return {"times": times, "seconds": seconds, "cpu": cpu, "actor_cpu": mesh.cpu_seconds.call_one().get() - a0}


def toggle(metrics: bool, sample: float, runner: Any = None) -> None:
    """Count calls (``metrics``) and trace this fraction of root calls (``sample``) from now on, in this
    process; ``runner``: this actor's ``ActorRunner``, whose handler counters follow ``metrics``."""
    from tetrarch._runtime.actors._stats import EndpointStats
    from tetrarch._telemetry import _caller, _io

    os.environ["TETRARCH_TRACE_SAMPLE"] = repr(sample)
    _caller._metrics[0] = metrics
    _io.ON = metrics
    _caller.refresh()  # reads the trace setting again
    if runner is not None:
        runner.stats = (runner.stats or EndpointStats()) if metrics else None
