"""Scenario: a single-host RDMA program, which must print nothing but its own line.

Two procs; one owns a buffer over a float tensor's byte view (registered with every backend
available, as a user's ``RDMABuffer(t.view(torch.uint8).flatten())`` is); the other proc and
the client read it over the same-host ``shm`` path; the client asks ``get_rdma_backend()``.
Prints ``backend=<name> ok`` and nothing else on stdout or stderr (no warning, in any process).

Run by ``tests/rdma/test_fallback_warning.py``.
"""

from __future__ import annotations

from tetrarch import shutdown_context, this_host
from tetrarch.rdma import get_rdma_backend
from tetrarch.testing import scaled
from tetrarch.testing._rdma_actors import Holder, digest, pattern

procs = this_host().spawn_procs(per_host={"gpus": 2})
try:
    owner = procs.slice(gpus=0).spawn("owner", Holder)
    reader = procs.slice(gpus=1).spawn("reader", Holder)
    buf = owner.make_view.call_one("w", 4096, 3, None, "torch").get(timeout=scaled(60))
    assert reader.read_from.call_one(buf).get(timeout=scaled(30)) == digest(pattern(4096, 3))
    dst = bytearray(4096)
    buf.read_into(dst, timeout=scaled(30)).get(timeout=scaled(30))
    assert dst == pattern(4096, 3)
    assert get_rdma_backend() in ("shm", "tcp")
    print(f"backend={buf.backend} ok", flush=True)
finally:
    procs.stop().get(timeout=scaled(30))
    shutdown_context().get(timeout=scaled(30))
