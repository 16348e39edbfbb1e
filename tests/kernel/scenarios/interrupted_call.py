"""Scenario: Ctrl-C while the main thread waits on a call that runs for a minute.

``python interrupted_call.py``: starts 2 procs, calls an endpoint that sleeps 60 s,
prints ``READY`` and waits on it. The test sends SIGINT (once, or twice). Run by
``test_readable_failures.py``.
"""

from __future__ import annotations

import time

from tetrarch import Actor, endpoint, this_host


class Sleeper(Actor):
    @endpoint
    def nap(self, seconds: float) -> None:
        time.sleep(seconds)


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("sleepers", Sleeper)
    pending = mesh.nap.call(60.0)
    mesh.initialized.get()
    print("READY", flush=True)
    pending.get()


if __name__ == "__main__":
    main()
