"""One measurement of the suite in a fresh process: ``_suite_worker.py FRAMEWORK WORKLOAD SIZE PARAMS``.

FRAMEWORK is ``tetrarch``, ``ray``, ``monarch`` (run with the peers' interpreter) or
``raw:<baseline>``; PARAMS is ``_workloads.params()`` as JSON. The last line of stdout is
``{"value": <figure, times in seconds>, "extra": {...}}``, or ``{"error": "..."}`` with
exit status 1. Run as a script so that this folder is on ``sys.path`` (the runner also puts
it on ``PYTHONPATH``, which procs inherit, so they import ``bench_actors`` by name).
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any


def measure(framework: str, workload: str, size: str, p: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """The figure and any extra facts of one measurement."""
    if framework.startswith("raw:"):
        import _raw_workloads

        return _raw_workloads.run(framework[4:], workload, size, p), {}
    if framework == "tetrarch":
        import _mesh_workloads

        import tetrarch
        from tetrarch import shutdown_context, this_host

        try:
            return _mesh_workloads.run(this_host, workload, size, p), {"version": tetrarch.__version__}
        finally:
            shutdown_context().get(timeout=60)
    if framework == "ray":
        from peers import _ray as adapter
    elif framework == "monarch":
        from peers import _monarch as adapter  # type: ignore[no-redef]
    else:
        raise KeyError(f"unknown framework {framework!r}")
    return adapter.run(workload, size, p), adapter.EXTRA


def main() -> int:
    framework, workload, size, p = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    try:
        value, extra = measure(framework, workload, size, p)
    except Exception as exc:  # noqa: BLE001 - reported to the runner, which shows n/a
        traceback.print_exc()
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]}), flush=True)
        return 1
    print(json.dumps({"value": value, "extra": extra}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
