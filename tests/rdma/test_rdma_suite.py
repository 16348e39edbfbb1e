"""Core's RDMA backends pass the contract (``tetrarch.testing.rdma.RdmaSuite``).

To run the suite for another core backend, add its name to ``CORE_BACKENDS``; a backend
that is not available here is skipped with its probe's reason.
"""

from __future__ import annotations

import pytest

from tetrarch.plugins import BackendKind, Status, get_registry
from tetrarch.testing.rdma import RdmaSuite

CORE_BACKENDS = ["tcp", "shm"]


def _skip_unless_available(name: str) -> None:
    row = next((r for r in get_registry().statuses(BackendKind.RDMA) if r.name == name), None)
    if row is None or row.status is not Status.AVAILABLE:
        pytest.skip(f"RDMA backend {name!r} is {row.status.value if row else 'not installed'}: "
                    f"{row.reason if row else ''}")


class TestCoreRdma(RdmaSuite):
    @pytest.fixture(scope="class", params=CORE_BACKENDS)
    @classmethod
    def backend(cls, request: pytest.FixtureRequest) -> str:
        _skip_unless_available(request.param)
        return str(request.param)
