"""Scenario: the client's transport travels to its host agents and procs (fresh interpreter).

argv[1] is the mode; prints one JSON line.

* ``addresses``: spawn 2 procs; print the client's, the host agent's and each proc's
  listen address and transport, and the ``TETRARCH_ALLOC_TRANSPORT`` they were given.
* ``mismatch TRANSPORT``: hand the host agents ``TRANSPORT`` instead of the client's
  own (what a launcher bug or a hand-made environment would do); print the error.
* ``missing PLUGIN_DIR``: the client loads its transport from the plugin folder
  ``PLUGIN_DIR`` (on ``PYTHONPATH``), which is then removed before the host agent
  starts: a host without the client's transport plugin; print the error.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import tetrarch
from tetrarch import Actor, endpoint, this_host
from tetrarch._runtime.meshes import _proc_mesh
from tetrarch._runtime.process._root import get_root


class Where(Actor):
    @endpoint
    def where(self) -> dict[str, str]:
        root = get_root()
        return {"address": root.router.address, "transport": root.transport_name,
                "alloc_transport": os.environ.get("TETRARCH_ALLOC_TRANSPORT", ""),
                "host_agent": os.environ.get("TETRARCH_HOST_AGENT_ADDR", "")}


def _spawn_error() -> str:
    try:
        procs = this_host().spawn_procs(per_host={"gpus": 1})
    except tetrarch.ProcessStartError as exc:
        return f"{type(exc).__name__}: {exc}"
    procs.stop().get()
    return ""


def main() -> int:
    mode = sys.argv[1]
    root = get_root()
    out: dict[str, object] = {"client": root.router.address, "client_transport": root.transport_name}
    if mode == "addresses":
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        out["procs"] = procs.spawn("where", Where).where.call().get().values()
        procs.stop().get()
    elif mode == "mismatch":
        wrong = sys.argv[2]
        real = _proc_mesh.child_env

        def told_wrong(r: object, extra: dict[str, str]) -> dict[str, str]:
            env = real(r, extra)  # type: ignore[arg-type]
            env["TETRARCH_ALLOC_TRANSPORT"] = wrong
            return env

        _proc_mesh.child_env = told_wrong  # type: ignore[assignment]
        out["error"] = _spawn_error()
    elif mode == "missing":
        shutil.rmtree(sys.argv[2])  # the client's registry and transport are loaded already
        out["error"] = _spawn_error()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
