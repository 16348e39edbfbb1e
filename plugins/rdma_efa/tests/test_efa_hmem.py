"""Device memory through libfabric's HMEM interface (issue 13, "GPU memory").

Where torch has a GPU, the efa backend asks the provider for an endpoint with ``FI_HMEM``
and registers CUDA/ROCm tensors with ``FI_HMEM_CUDA``/``FI_HMEM_ROCR``. This machine has no
GPU, but its libfabric's ``shm`` offers ``FI_HMEM``: the tests here open that endpoint for
real and check that host memory still moves through it, to and from procs whose endpoints
are plain, and that device memory on an endpoint without ``FI_HMEM`` is refused with the
fix. Transfers of CUDA tensors themselves are in tests/rdma/test_rdma_cuda.py (GPU only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tetrarch import configured
from tetrarch.testing import scaled
from tetrarch.testing.rdma import backend_instance, digest, holders, pattern
from tetrarch_rdma_efa._discover import discover

pytestmark = pytest.mark.timeout(scaled(120))

MiB = 1 << 20


def _backend() -> Any:
    return backend_instance("efa")


@pytest.fixture
def hmem_shm() -> Iterator[Any]:
    """This process's efa backend with an FI_HMEM endpoint of ``shm`` in place of the plain one."""
    from tetrarch_rdma_efa._endpoint import Endpoint

    found = discover()
    if "shm" not in found.hmem:
        pytest.skip(f"libfabric {found.version or '(absent)'} offers FI_HMEM with no RMA provider here "
                    f"(FI_HMEM providers: {found.hmem or 'none'}; {found.error or 'no error'})")
    with configured(efa_provider="shm", efa_allow_unchecked_access=True):
        backend = _backend()
        plain = backend.endpoint("shm")
        ep = Endpoint(backend._module, "shm", hmem=True)
        with backend._lock:
            backend._endpoints["shm"] = ep
        try:
            yield ep
        finally:
            with backend._lock:
                backend._endpoints["shm"] = plain
            ep.close()


def test_an_hmem_endpoint_moves_host_memory_both_ways(hmem_shm: Any) -> None:
    """Reads from a proc's buffer, and a proc reading ours, through an endpoint with FI_HMEM and
    FI_MR_HMEM on this side and a plain one on the other: host memory is unaffected."""
    from tetrarch.rdma import RDMABuffer

    assert hmem_shm.hmem and hmem_shm.mr_mode & hmem_shm.lib.FI_MR_HMEM
    with holders("hmem") as mesh:
        theirs = mesh.make.call_one("h", 3 * MiB + 5, 4, "efa").get(timeout=scaled(60))
        dst = bytearray(3 * MiB + 5)
        theirs.read_into(dst, timeout=scaled(20)).get(timeout=scaled(20))
        assert digest(dst) == digest(pattern(3 * MiB + 5, 4))
        mine = pattern(2 * MiB + 1, 9)
        buf = RDMABuffer(memoryview(mine), backend="efa")
        assert mesh.read_from.call_one(buf).get(timeout=scaled(30)) == digest(mine)
        assert _backend()._mrs[buf._desc.buffer_id][0] is hmem_shm  # registered through the HMEM endpoint


def test_device_memory_on_an_endpoint_without_hmem_is_refused_with_the_fix() -> None:
    """``tcp;ofi_rxm`` offers no FI_HMEM: registering device memory fails before libfabric is asked."""
    from tetrarch_rdma_efa._endpoint import Endpoint, EndpointError

    found = discover()
    if "tcp;ofi_rxm" not in found.rma:
        pytest.skip(f"libfabric offers no 'tcp;ofi_rxm' here (RMA providers: {found.rma}; {found.error})")
    with configured(efa_provider="tcp;ofi_rxm"):
        backend = _backend()
        backend.endpoint("tcp;ofi_rxm")  # loads the binding
    ep = Endpoint(backend._module, "tcp;ofi_rxm", hmem=True)
    try:
        assert not ep.hmem  # asked for, not offered: the endpoint opened without it
        with pytest.raises(EndpointError, match=r"does not offer FI_HMEM here.*stage it through host memory"):
            ep.register(0x7F0000000000, 4096, ep.lib.FI_REMOTE_READ, 1, ep.lib.FI_HMEM_CUDA, 0)
    finally:
        ep.close()
