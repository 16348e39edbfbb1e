"""``tetrarch_alloc_local`` still imports, as core's allocator, and adds no backend."""

from __future__ import annotations

import importlib.metadata

import tetrarch_alloc_local
from tetrarch._runtime import _local_alloc


def test_the_compat_names_are_cores_classes() -> None:
    assert tetrarch_alloc_local.LocalAllocator is _local_alloc.LocalAllocator
    assert tetrarch_alloc_local.LocalAllocation is _local_alloc.LocalAllocation


def test_the_compat_distribution_registers_no_backend() -> None:
    dist = importlib.metadata.distribution("tetrarch-alloc-local")
    assert [ep for ep in dist.entry_points if ep.group == "tetrarch"] == []
