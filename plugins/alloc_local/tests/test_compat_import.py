"""``tetrarch_alloc_local`` still imports, as core's allocator, and adds no backend."""

from __future__ import annotations

import importlib.metadata

import tetrarch_alloc_local
from tetrarch.plugins import Registry
from tetrarch.plugins.allocator import LocalAllocation, LocalAllocator


def test_the_compat_names_are_cores_classes() -> None:
    assert tetrarch_alloc_local.LocalAllocator is LocalAllocator
    assert tetrarch_alloc_local.LocalAllocation is LocalAllocation
    registry = Registry(entry_points=False)  # core alone: its own 'local' allocator
    try:
        assert type(registry.get_allocator("local")) is tetrarch_alloc_local.LocalAllocator
    finally:
        registry.close()


def test_the_compat_distribution_registers_no_backend() -> None:
    dist = importlib.metadata.distribution("tetrarch-alloc-local")
    assert [ep for ep in dist.entry_points if ep.group == "tetrarch"] == []
