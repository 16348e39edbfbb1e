"""An RDMA buffer's registration ends with the actor that made it, at once, not at the next lookup."""

from __future__ import annotations

import pytest

from tetrarch import this_host
from tetrarch.rdma import RDMAError
from tetrarch.testing import scaled
from tetrarch.testing._rdma_actors import Holder

pytestmark = pytest.mark.timeout(scaled(90))


@pytest.mark.parametrize("backend", ["tcp", "shm"])
def test_stopping_the_owning_actor_releases_its_registrations_at_once(backend: str) -> None:
    """A user stops the actor that published buffers: its memory (held by the registration until then)
    is released as the stop completes, and a handle still held elsewhere fails with the reason."""
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        owner = procs.spawn("rdma_owner", Holder)
        probe = procs.spawn("rdma_probe", Holder)  # the same proc: sees its registration table
        bufs = [owner.make.call_one(f"k{i}", 4096, i, backend).get(timeout=scaled(30)) for i in range(3)]
        assert len(probe.registrations.call_one().get(timeout=scaled(30))) == 3
        owner.stop().get(timeout=scaled(30))
        assert probe.registrations.call_one().get(timeout=scaled(30)) == [], (
            "the stopped actor's registrations must be released when its stop completes")
        for buf in bufs:
            with pytest.raises(RDMAError, match=r"released .*the actor that created it stopped"):
                buf.read_into(bytearray(4096), timeout=scaled(30)).get(timeout=scaled(30))
    finally:
        procs.stop().get(timeout=scaled(30))
