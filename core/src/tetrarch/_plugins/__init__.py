"""tetrarch's plugin layer: hookspecs, spec records and the registry.

Public names for plugin authors live in :mod:`tetrarch.plugins`; the kernel uses
:func:`get_registry` from here.
"""

from __future__ import annotations

from ._api import API_ATTRIBUTE, PLUGIN_API_VERSION, check_api
from ._errors import BackendNotFound, BackendUnavailable, PluginLoadError
from ._hookspecs import PROJECT, hookimpl, hookspec
from ._known import KNOWN_BACKENDS, KnownBackend, known_backend
from ._loader import ENTRY_POINT_GROUP, PluginRecord, PluginSource, PluginState
from ._registry import (
    DISABLE_ENV,
    ENV_BY_KIND,
    FALLBACK_ENV,
    SETTING_BY_KIND,
    STRICT_ENV,
    Registry,
    get_allocator,
    get_registry,
    get_transport,
    reset_registry,
    split_address,
)
from ._request import SelectionRequest
from ._specs import (
    AllocatorSpec,
    BackendKind,
    BackendSpec,
    BackendStatus,
    Capability,
    ProbeResult,
    RdmaBackendSpec,
    Status,
    TransportSpec,
)

__all__ = [
    "API_ATTRIBUTE",
    "DISABLE_ENV",
    "ENTRY_POINT_GROUP",
    "ENV_BY_KIND",
    "FALLBACK_ENV",
    "KNOWN_BACKENDS",
    "PLUGIN_API_VERSION",
    "PROJECT",
    "SETTING_BY_KIND",
    "STRICT_ENV",
    "AllocatorSpec",
    "BackendKind",
    "BackendNotFound",
    "BackendSpec",
    "BackendStatus",
    "BackendUnavailable",
    "Capability",
    "KnownBackend",
    "PluginLoadError",
    "PluginRecord",
    "PluginSource",
    "PluginState",
    "ProbeResult",
    "RdmaBackendSpec",
    "Registry",
    "SelectionRequest",
    "Status",
    "TransportSpec",
    "check_api",
    "get_allocator",
    "get_registry",
    "get_transport",
    "hookimpl",
    "hookspec",
    "known_backend",
    "reset_registry",
    "split_address",
]
