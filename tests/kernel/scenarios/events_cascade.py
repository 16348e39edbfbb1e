"""A two-level failure cascade with TETRARCH_EVENT_LOG=json: a Fragile actor fails, its owner (a
Supervisor actor that does not handle it) fails in turn, and the failure reaches the client."""

import threading

import tetrarch
from supervision_actors import Supervisor
from tetrarch import this_host

seen = []
got = threading.Event()


def hook(failure):
    seen.append(failure)
    got.set()


tetrarch.unhandled_fault_hook = hook
procs = this_host().spawn_procs(per_host={"gpus": 1}, name="owners")
child_procs = this_host().spawn_procs(per_host={"gpus": 2}, name="children")
sup = procs.spawn("sup_pass", Supervisor, child_procs, "pass")
sup.fail_child.call_one(0).get(timeout=60)
assert got.wait(60), "the cascade never reached the client"
child_procs.stop().get(timeout=60)
procs.stop().get(timeout=60)
print("DONE", seen[0].mesh_name, flush=True)
