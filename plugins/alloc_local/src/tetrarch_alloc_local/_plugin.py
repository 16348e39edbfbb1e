"""Entry point module (featherweight): declares the ``local`` allocator.

Imports only :mod:`tetrarch.plugins`; the allocator itself (``_local``) is imported
when a program first uses the backend.
"""

from __future__ import annotations

from collections.abc import Sequence

from tetrarch.plugins import AllocatorSpec, Capability, ProbeResult, hookimpl

#: The plugin API version this plugin was written for (tetrarch.plugins.PLUGIN_API_VERSION).
tetrarch_plugin_api = "1.2"


def probe() -> ProbeResult:
    """Always available: host agents are processes of this machine."""
    return ProbeResult.yes("host agents are processes on this machine")


@hookimpl
def tetrarch_allocators() -> Sequence[AllocatorSpec]:
    return [
        AllocatorSpec(
            "local",
            "tetrarch_alloc_local._local:LocalAllocator",
            probe=probe,
            priority=10,
            extra="local",
            summary="host agents as processes on this machine",
            capabilities=frozenset({Capability.SAME_HOST}),
        )
    ]
