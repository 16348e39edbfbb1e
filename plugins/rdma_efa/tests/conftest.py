"""Fixtures of the efa tests: end the host agents when the session ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tetrarch import shutdown_context
from tetrarch.testing import scaled


@pytest.fixture(scope="session", autouse=True)
def _shutdown_tetrarch_at_session_end() -> Iterator[None]:
    yield
    shutdown_context().get(timeout=scaled(30))
