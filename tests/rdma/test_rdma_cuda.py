"""CUDA/ROCm tensors at RDMABuffer's seam. Needs torch with a GPU: skips elsewhere (this VM's torch is CPU-only).

Run on a GPU machine: ``pytest tests/rdma/test_rdma_cuda.py plugins/rdma_verbs/tests -q``.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch reports no CUDA/ROCm device here "
                       f"(torch {torch.__version__}, cuda build: {torch.version.cuda}, hip: {torch.version.hip})"),
]


def test_a_cuda_tensor_is_a_device_region() -> None:
    from tetrarch._rdma._backend import MemoryKind
    from tetrarch._rdma._memory import as_memory

    t = torch.arange(1024, dtype=torch.uint8, device="cuda")
    memory = as_memory(t, "x", writable=True)
    assert memory.region.kind is MemoryKind.CUDA and memory.region.view is None
    assert memory.region.address == t.data_ptr() and memory.region.nbytes == 1024


def test_core_backends_refuse_to_own_device_memory_with_the_fix() -> None:
    from tetrarch.plugins import BackendUnavailable
    from tetrarch.rdma import RDMABuffer

    t = torch.zeros(4096, dtype=torch.uint8, device="cuda")
    with pytest.raises(BackendUnavailable, match="cannot register cuda memory"):
        RDMABuffer(t, backend="tcp")


@pytest.fixture(scope="module")
def holder() -> Any:
    from tetrarch.testing.rdma import holders

    with holders("cuda_holders") as mesh:
        yield mesh


@pytest.mark.parametrize("backend", ["tcp", "shm"])
@pytest.mark.parametrize("nbytes", [1, 4097, (64 << 20) + 7])
def test_read_into_and_write_from_a_cuda_tensor_are_staged_through_pinned_memory(holder: Any, backend: str,
                                                                                    nbytes: int) -> None:
    """A remote CPU buffer read into, and written from, GPU memory (tcp and shm take host memory only)."""
    from tetrarch.testing._rdma_actors import digest, pattern

    buf = holder.make.call_one(f"cuda-{backend}-{nbytes}", nbytes, 3, backend).get(timeout=60)
    want = pattern(nbytes, 3)
    # A float32 tensor longer than needed: the read fills its leading bytes and leaves the rest.
    dst = torch.empty((nbytes + 3) // 4 + 1, dtype=torch.float32, device="cuda")
    dst.view(torch.uint8).fill_(0xAB)
    buf.read_into(dst, timeout=60).get(timeout=90)
    got = dst.view(torch.uint8).cpu()
    assert got[:nbytes].numpy().tobytes() == bytes(want)
    assert bool((got[nbytes:] == 0xAB).all())
    src = torch.arange(nbytes, dtype=torch.int64, device="cuda").remainder(253).to(torch.uint8)
    buf.write_from(src, timeout=60).get(timeout=90)
    assert holder.digest.call_one(f"cuda-{backend}-{nbytes}").get(timeout=60) == digest(src.cpu().numpy())
    buf.drop().get(timeout=30)


def test_a_cuda_slice_reads_at_its_own_offset(holder: Any) -> None:
    """A view into the middle of a larger device tensor: the bytes land there, not at the base."""
    from tetrarch.testing._rdma_actors import pattern

    buf = holder.make.call_one("cuda-slice", 1000, 5, "tcp").get(timeout=60)
    big = torch.zeros(3000, dtype=torch.uint8, device="cuda")
    buf.read_into(big[1000:2000], timeout=60).get(timeout=90)
    assert big[:1000].count_nonzero().item() == 0 and big[2000:].count_nonzero().item() == 0
    assert big[1000:2000].cpu().numpy().tobytes() == bytes(pattern(1000, 5))
    buf.drop().get(timeout=30)


def _efa_shm() -> Any:
    """The client's efa backend over libfabric's shm (skips where libfabric or shm is missing)."""
    pytest.importorskip("tetrarch_rdma_efa")
    from tetrarch_rdma_efa.testing import discover

    found = discover()
    if "shm" not in found.rma:
        pytest.skip(f"efa: libfabric offers no 'shm' provider here ({found.error or found.rma})")
    from tetrarch._rdma._service import rdma_service
    from tetrarch.plugins import BackendUnavailable

    try:
        return rdma_service().backend("efa"), found
    except BackendUnavailable as exc:  # e.g. libfabric's runtime is there, its headers (to build) are not
        pytest.skip(f"efa: {exc}")


@pytest.mark.parametrize("nbytes", [4097, (64 << 20) + 7])
def test_cuda_tensors_through_efa_use_hmem_where_the_provider_offers_it(nbytes: int) -> None:
    """efa over shm (owner and reader): with FI_HMEM the tensor is registered as device memory (no
    staging); without it the transfer stages through pinned host memory. Either way the bytes are right."""
    from tetrarch import configured
    from tetrarch._rdma._backend import MemoryKind
    from tetrarch.rdma import RDMABuffer
    from tetrarch.testing._rdma_actors import digest, pattern
    from tetrarch.testing.rdma import holders

    with configured(efa_provider="shm", efa_allow_unchecked_access=True), holders("cuda_efa") as holder:
        backend, found = _efa_shm()
        buf = holder.make.call_one("b", nbytes, 6, "efa").get(timeout=60)
        dst = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
        buf.read_into(dst, timeout=60).get(timeout=90)
        assert dst.cpu().numpy().tobytes() == bytes(pattern(nbytes, 6))
        direct = MemoryKind.CUDA in backend.memory_kinds
        assert direct == ("shm" in found.hmem), (backend.memory_kinds, found)
        src = torch.arange(nbytes, device="cuda").remainder(251).to(torch.uint8)
        buf.write_from(src, timeout=60).get(timeout=90)
        assert holder.digest.call_one("b").get(timeout=60) == digest(src.cpu().numpy())
        if direct:  # a proc reads a GPU tensor registered through FI_HMEM_CUDA
            mine = RDMABuffer(src, backend="efa")
            assert holder.read_from.call_one(mine).get(timeout=60) == digest(src.cpu().numpy())
            mine.drop().get(timeout=30)
        buf.drop().get(timeout=30)
