"""Pieces shared by the transport kits (:mod:`tetrarch.testing.transport` and its parts)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from ._raw_sock import raw_sockaddr

__all__ = ["TEST_TIMEOUT", "WAIT", "bounded", "pattern", "raw_sockaddr"]  # raw_sockaddr: see _raw_sock

#: Seconds any single expected event may take before a test fails.
WAIT = 10.0
#: Upper bound for one test, enforced by pytest-timeout when it is installed.
TEST_TIMEOUT = 30

_F = TypeVar("_F", bound=Callable[..., Any])


def bounded(fn: _F) -> _F:
    """``fn`` with pytest-timeout's ``TEST_TIMEOUT`` mark, where pytest-timeout is installed."""
    if importlib.util.find_spec("pytest_timeout") is None:
        return fn
    return pytest.mark.timeout(TEST_TIMEOUT)(fn)


def pattern(size: int, seed: int = 0) -> bytes:
    """Deterministic, non-repeating-at-small-period bytes."""
    block = bytes((i * 7 + seed) & 0xFF for i in range(251))  # prime length
    reps, rest = divmod(size, len(block))
    return block * reps + block[:rest]
