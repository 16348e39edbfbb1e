"""Switch one process's per-call telemetry on and off while it runs (``bench_telemetry.py --paired``).

Benchmark-only: it sets tetrarch's private switches, the ones the call path reads. The process
must have started with metrics on and tracing sampled (``TETRARCH_METRICS=1``,
``TETRARCH_TRACE_SAMPLE`` above 0), so that the exporter and the span subscribers exist; what
runs on a timer (the metric exporter, the span store's flush) keeps running in every mode, and
so is not part of the difference this measures.
"""

from __future__ import annotations

import os
from typing import Any


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
