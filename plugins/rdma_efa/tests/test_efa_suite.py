"""``RdmaSuite`` through the efa backend over libfabric's software providers: real one-sided RMA between procs.

Each class selects its provider with ``configure(efa_provider=...)`` before its procs
start (the setting propagates to them). Buffers are made with ``backend="efa"``, so their
descriptors hold only the efa context: no fallback can move the bytes, and
``test_the_bytes_went_through_libfabric`` checks this process's endpoint completed them.
"""

from __future__ import annotations

from typing import Any

import pytest

from tetrarch.testing import scaled
from tetrarch.testing.rdma import RdmaSuite, backend_instance, digest, pattern


@pytest.mark.usefixtures("efa_provider")
class _EfaSuite(RdmaSuite):
    provider = ""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> str:
        return "efa"

    @pytest.fixture(scope="class")
    @classmethod
    def stalls_when_owner_stopped(cls) -> bool:
        return False  # shm's CMA path reads a stopped owner's memory; tcp;ofi_rxm stalls: either is fine

    def test_the_bytes_went_through_libfabric(self, owner: Any, backend: str) -> None:
        buf = self._make(owner, backend, 1 << 20, seed=9, key="through-efa")
        assert buf.backend == "efa"
        endpoint = backend_instance("efa").endpoint(self.provider)
        before = endpoint.completed
        dst = bytearray(1 << 20)
        buf.read_into(dst, timeout=scaled(30)).get(timeout=scaled(30))
        assert digest(dst) == digest(pattern(1 << 20, 9))
        assert endpoint.completed > before
        assert endpoint.provider == self.provider


class TestEfaShm(_EfaSuite):
    provider = "shm"


class TestEfaTcpRxm(_EfaSuite):
    provider = "tcp;ofi_rxm"
