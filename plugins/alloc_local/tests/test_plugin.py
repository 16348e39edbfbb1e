"""``tetrarch-alloc-local`` registers the ``local`` allocator through its entry point, like every allocator."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import tetrarch_alloc_local
from tetrarch.plugins import BackendKind, Registry, Status
from tetrarch.plugins.allocator import LocalAllocation, LocalAllocator


def test_the_entry_point_declares_the_local_allocator() -> None:
    dist = importlib.metadata.distribution("tetrarch-alloc-local")
    (ep,) = [ep for ep in dist.entry_points if ep.group == "tetrarch"]
    assert (ep.name, ep.value) == ("local", "tetrarch_alloc_local._plugin")
    registry = Registry()
    try:
        (row,) = [r for r in registry.statuses(BackendKind.ALLOCATOR) if r.name == "local"]
        assert (row.distribution, row.status) == ("tetrarch-alloc-local", Status.AVAILABLE)
        assert row.spec is not None and row.spec.capabilities == {"same-host"} and row.spec.priority == 10
        assert type(registry.get_allocator("local")) is tetrarch_alloc_local.LocalAllocator
    finally:
        registry.close()


def test_core_depends_on_it() -> None:
    requires = importlib.metadata.requires("tetrarch") or []
    assert any(r.split(";")[0].strip() == "tetrarch-alloc-local" for r in requires), requires


def test_the_public_allocator_module_re_exports_the_plugins_classes() -> None:
    assert LocalAllocator is tetrarch_alloc_local.LocalAllocator
    assert LocalAllocation is tetrarch_alloc_local.LocalAllocation
    assert LocalAllocator.__module__ == "tetrarch_alloc_local._local"


def test_the_entry_point_module_is_featherweight() -> None:
    code = ("import json, sys, tetrarch_alloc_local._plugin; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('tetrarch_alloc_local', "
            "'tetrarch.plugins.allocator', 'tetrarch._runtime.plumbing._spawn', 'torch')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == ["tetrarch_alloc_local", "tetrarch_alloc_local._plugin"]
