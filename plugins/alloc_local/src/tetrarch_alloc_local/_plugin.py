"""Entry point module (featherweight: the allocator loads only when used)."""

from __future__ import annotations

from collections.abc import Sequence

from tetrarch.plugins import BackendKind, BackendSpec, ProbeResult, hookimpl


def probe() -> ProbeResult:
    """Always available: host agents are child processes of this one."""
    return ProbeResult.yes("host agents are processes on this machine")


@hookimpl
def tetrarch_allocators() -> Sequence[BackendSpec]:
    return [
        BackendSpec(
            BackendKind.ALLOCATOR,
            "local",
            "tetrarch_alloc_local._local:LocalAllocator",
            probe=probe,
            priority=10,
            extra="local",
            summary="host agents as processes on this machine",
            capabilities=frozenset({"same-host"}),
        )
    ]
