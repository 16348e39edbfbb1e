"""Scenario: a child that takes the allocation's secret as host agents and procs do.

``child OUT``: read the secret with ``take_secret()`` (from the inherited pipe or the
0600 file), then write to the file ``OUT`` (JSON) what it read and what is left of it:
whether an fd still points at the pipe, whether the variables are still in
``os.environ``, and whether the secret appears in ``/proc/self/environ``.

``missing proc|host``: run a proc's or host agent's ``main()`` started without a secret.
"""

from __future__ import annotations

import json
import os
import sys

from tetrarch._config import ENV_SECRET_FD, ENV_SECRET_FILE
from tetrarch._runtime.plumbing._secret import take_secret


def _fd_links() -> dict[int, str]:
    links = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            links[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass  # the fd listdir itself used
    return links


def child(out: str) -> int:
    fd_text = os.environ.get(ENV_SECRET_FD.name)
    pipe = f"pipe:[{os.fstat(int(fd_text)).st_ino}]" if fd_text else None
    secret = take_secret()
    with open("/proc/self/environ", "rb") as f:
        initial = f.read()
    result = {
        "secret": secret.hex(),
        "pipe": pipe,
        "pipe_left_open": pipe is not None and pipe in _fd_links().values(),
        "vars_left": sorted(v for v in (ENV_SECRET_FD.name, ENV_SECRET_FILE.name) if v in os.environ),
        "in_initial_environ": secret.hex().encode() in initial or secret in initial,
    }
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


def missing(program: str) -> int:
    if program == "proc":
        from tetrarch._runtime.programs._proc_main import main
    else:
        from tetrarch._runtime.programs._host_agent import main
    return main()


if __name__ == "__main__":
    sys.exit(child(sys.argv[2]) if sys.argv[1] == "child" else missing(sys.argv[2]))
