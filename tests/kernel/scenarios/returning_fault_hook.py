"""Scenario: a fault hook that returns keeps the client running after an actor failed.

Prints ``SEEN <failure>`` once the failure reached the hook and ``STILL RUNNING <answer>``
from a surviving rank. Run by ``test_fault_hook.py``.
"""

from __future__ import annotations

import tetrarch
from supervision_actors import Fragile
from tetrarch import MeshFailure, this_host
from tetrarch.testing import Collector, scaled


def main() -> None:
    seen: Collector[MeshFailure] = Collector("failures at the fault hook")
    tetrarch.unhandled_fault_hook = seen.add
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("doomed", Fragile)
    mesh.slice(gpus=1).raise_exc.broadcast()
    (failure,) = seen.wait(1, timeout=30)
    print("SEEN", failure)
    print("STILL RUNNING", mesh.slice(gpus=0).ok.call_one().get(timeout=scaled(10)))
    procs.stop().get(timeout=scaled(30))


if __name__ == "__main__":
    main()
