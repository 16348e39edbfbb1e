"""Fixtures of the efa tests: the provider a class asks for, and ending the host agents at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tetrarch import configured, shutdown_context
from tetrarch.testing import scaled
from tetrarch.testing.rdma import close_backends
from tetrarch_rdma_efa._discover import discover

_found = discover()


def need_provider(provider: str) -> None:
    """Skip unless the installed libfabric offers ``provider`` with RMA (the reason says what it has)."""
    if _found.error:
        pytest.skip(f"efa backend: {_found.error}")
    if provider not in _found.rma:
        pytest.skip(f"libfabric {_found.version} offers no RMA provider {provider!r} here (has: {_found.rma})")


@pytest.fixture(scope="class")
def efa_provider(request: pytest.FixtureRequest) -> Iterator[str]:
    """The class's ``provider`` attribute, configured (``efa_provider``) for the class's procs; over
    ``shm``, whose accesses no owner checks, with ``efa_allow_unchecked_access`` (docs/rdma.md)."""
    provider: str = request.cls.provider
    need_provider(provider)
    with configured(efa_provider=provider, **unchecked(provider)):
        yield provider


def unchecked(provider: str) -> dict[str, bool]:
    """The opt-in a test needs to register buffers over ``provider`` (``shm``), else nothing."""
    from tetrarch_rdma_efa._plugin import OWNER_CHECKED

    return {} if provider in OWNER_CHECKED else {"efa_allow_unchecked_access": True}


@pytest.fixture(scope="session", autouse=True)
def _shutdown_tetrarch_at_session_end() -> Iterator[None]:
    yield
    shutdown_context().get(timeout=scaled(30))
    close_backends("efa")  # this process's endpoints, and the janitor of its shm segment (docs/rdma.md)
