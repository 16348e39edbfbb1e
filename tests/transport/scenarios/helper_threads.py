"""Print the scheduling policy of every thread of this client and of one proc (JSON, one line).

Run with ``TETRARCH_TRANSPORT`` set (test_helper_threads.py): the transport's library starts
its threads in both processes, and one call goes through them.
"""

from __future__ import annotations

import json
import os

from tetrarch import Actor, endpoint, this_host


def policies() -> dict[str, object]:
    """This process's own policy (``base``: the one its threads inherit) and, by thread name, the
    scheduling policies of the threads of that name (``threads``)."""
    out: dict[str, set[int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            out.setdefault(name, set()).add(os.sched_getscheduler(int(tid)))
        except OSError:  # the thread ended meanwhile
            continue
    return {"base": os.sched_getscheduler(os.getpid()), "threads": {name: sorted(p) for name, p in out.items()}}


class Threads(Actor):
    @endpoint
    def policies(self) -> dict[str, object]:
        return policies()


if __name__ == "__main__":
    procs = this_host().spawn_procs(per_host={"procs": 1})
    try:
        proc = procs.spawn("threads", Threads).policies.call_one().get()
        print(json.dumps({"client": policies(), "proc": proc}))
    finally:
        procs.stop().get()
