"""A client of workers (``run_worker_loop_forever``), run by tests/kernel/test_workers.py.

    attach_client.py call SECRET ADDR...    attach, spawn 2 procs per worker, call them, shut down; JSON
    attach_client.py hold SECRET ADDR...    attach, spawn, print the procs' pids, then wait for stdin to close
    attach_client.py job SECRET CACHE ADDR...  WorkerJob({"w": ADDR...}).state(cached_path=CACHE); JSON
    attach_client.py twice SECRET ADDR...   attach twice (the second is refused), shut down, attach again
                                            (the addresses as futures); JSON

The last line of stdout is JSON: ``{"error": ..., "message": ...}`` on failure.
"""

from __future__ import annotations

import json
import sys

from job_actors import Where
from tetrarch import Future, attach_to_workers
from tetrarch.job import WorkerJob


def _pids(mesh) -> dict:
    procs = mesh.spawn_procs(per_host={"gpus": 2}, name="attached")
    where = procs.spawn("where", Where)
    return procs, {str(dict(point)): pids for point, pids in where.pids.call().get().items()}


def main() -> int:
    mode, secret, *rest = sys.argv[1:]
    try:
        if mode == "job":
            cache, *addresses = rest
            job = WorkerJob({"w": addresses}, secret_file=secret)
            state = job.state(cached_path=cache)
            procs, pids = _pids(state.w)
            out = {"apply_id": job.apply_id, "pids": pids}
            procs.stop().get()
            print(json.dumps(out), flush=True)
            return 0
        mesh = attach_to_workers(workers=rest, secret_file=secret, name="w")
        mesh.initialized.get()
        if mode == "twice":
            try:
                attach_to_workers(workers=rest, secret_file=secret).initialized.get()
                refused = ""
            except Exception as exc:  # noqa: BLE001 - reported
                refused = str(exc)
            mesh.shutdown().get()
            again = attach_to_workers(workers=[Future._completed(a) for a in rest], secret_file=secret)
            procs, pids = _pids(again)
            print(json.dumps({"refused": refused, "pids": pids}), flush=True)
            return 0
        procs, pids = _pids(mesh)
        if mode == "hold":
            print(json.dumps({"pids": pids}), flush=True)
            sys.stdin.read()  # the test kills us meanwhile
            return 0
        procs.stop().get()
        mesh.shutdown().get()
        print(json.dumps({"pids": pids}), flush=True)
    except Exception as exc:  # noqa: BLE001 - the test reads the JSON
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
