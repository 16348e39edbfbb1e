"""Starts with a soft open-file limit of 1024 (below the hard one) and prints the soft limit
that the client, its host agent and each proc run with once tetrarch started them."""

from __future__ import annotations

import resource

_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, _hard), _hard))  # before tetrarch: children inherit it

import os  # noqa: E402

from tetrarch import Actor, endpoint, this_host  # noqa: E402


class Limits(Actor):
    @endpoint
    def soft(self) -> int:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    @endpoint
    def agent_soft(self) -> int:
        agent = int(os.environ["TETRARCH_HOST_AGENT_PID"])  # its parent may be the host's zygote
        with open(f"/proc/{agent}/limits") as f:
            line = next(ln for ln in f if ln.startswith("Max open files"))
        return int(line.split()[3])


procs = this_host().spawn_procs(per_host={"gpus": 2})
mesh = procs.spawn("limits", Limits)
print("hard", _hard)
print("client", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
print("procs", *mesh.soft.call().get(timeout=60).values())
print("agent", mesh.slice(gpus=0).agent_soft.call_one().get(timeout=60))
procs.stop().get(timeout=60)
