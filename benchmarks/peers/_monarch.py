"""The suite's workloads on Monarch (runs in the peers' venv: ``torchmonarch==0.7.0``, no tetrarch).

Monarch 0.7's ``monarch.actor`` API is the one tetrarch follows (``this_host().spawn_procs(
per_host={"procs": N})``, ``spawn``, ``@endpoint``, ``call_one().get()``, ``call().get()``),
so the workloads are tetrarch's own (``_mesh_workloads``), the actors built on
``monarch.actor`` (``bench_actors`` reads ``TETRARCH_BENCH_FRAMEWORK``, set by the runner
for this process and so for its procs).
"""

from __future__ import annotations

import os
from typing import Any

EXTRA: dict[str, Any] = {}


def run(workload: str, size: str, p: dict[str, Any]) -> float:
    """One figure of ``workload`` at ``size`` on Monarch (times in seconds)."""
    os.environ["TETRARCH_BENCH_FRAMEWORK"] = "monarch"
    import importlib.metadata

    import _mesh_workloads
    from monarch.actor import this_host  # type: ignore[import-not-found]

    EXTRA["version"] = importlib.metadata.version("torchmonarch")
    return _mesh_workloads.run(this_host, workload, size, p)
