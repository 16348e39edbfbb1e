"""CUDA/ROCm tensors at RDMABuffer's seam. Needs torch with a GPU: skips elsewhere (this VM's torch is CPU-only).

Run on a GPU machine: ``pytest tests/rdma/test_rdma_cuda.py plugins/rdma_verbs/tests -q``.
"""

from __future__ import annotations

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


def test_core_backends_refuse_device_memory_with_the_fix() -> None:
    from tetrarch.plugins import BackendUnavailable
    from tetrarch.rdma import RDMABuffer

    t = torch.zeros(4096, dtype=torch.uint8, device="cuda")
    with pytest.raises(BackendUnavailable, match="cannot register cuda memory"):
        RDMABuffer(t, backend="tcp")
    buf = RDMABuffer(bytearray(b"x" * 4096), backend="tcp")
    with pytest.raises(ValueError, match=r"t\.cpu\(\)"):
        buf.read_into(t).get(timeout=30)
    buf.drop().get(timeout=10)
