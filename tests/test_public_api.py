"""The public packages' ``__all__`` lists match what they lazily export, and every name resolves.

The plugin API (``tetrarch.plugins`` and its submodules) is pinned name by name: a change
to it is a change of ``tetrarch.plugins.PLUGIN_API_VERSION`` (a new name: MINOR; a name
removed or renamed: MAJOR; see ``tetrarch._plugins._api``), so this list changes with it,
deliberately.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

#: Every name of the plugin API, by module, at PLUGIN_API_VERSION below.
PLUGIN_API_VERSION = "1.2"
PLUGIN_API: dict[str, set[str]] = {
    "tetrarch.plugins": {
        "PLUGIN_API_VERSION", "AgentCommand", "AllocRequest", "Allocation", "Allocator", "AllocatorError",
        "AllocatorSpec", "BackendKind", "BackendNotFound", "BackendSpec", "BackendStatus", "BackendUnavailable",
        "CallQueue", "Capability", "Connection", "ConnectionClosed", "ConnectionHandler", "ExitInfo",
        "HandshakeRefused", "IoLoop", "LeaderLoop", "Listener", "LocalRegion", "MemoryKind", "PeerIdentity",
        "PluginLoadError", "PluginRecord", "PluginSource", "PluginState", "PreAuthLimits", "ProbeResult",
        "QualifiedAddress", "RdmaBackend", "RdmaBackendSpec", "RdmaHost", "Registry", "RemoteRegion",
        "SelectionRequest", "Setting", "Status", "Transport", "TransportError", "TransportSpec", "WatchedProcess",
        "advertised_host", "batch_helper_threads", "connection_cap", "fresh_ipc_name", "get_allocator", "get_logger",
        "get_registry", "get_transport", "helper_thread_policy", "hookimpl", "hookspec", "library_probe",
        "module_present", "not_implemented_factory", "parse_qualified", "probe_in_child", "process_gone",
        "python_library_found", "setting", "settle", "spawn_watched",
    },
    "tetrarch.plugins.transport": {
        "COUNT", "MAX_FRAMES", "PRE_AUTH_LIMIT", "Buffer", "CallQueue", "Connection", "ConnectionClosed",
        "ConnectionHandler", "HandshakeRefused", "IoLoop", "LeaderLoop", "Listener", "PreAuthLimits",
        "QualifiedAddress", "SinkResolver", "Transport", "TransportError", "advertised_host", "as_bytes",
        "batch_helper_threads", "connection_cap", "consume", "fresh_ipc_name", "header", "helper_thread_policy",
        "nbytes", "parse_qualified", "receive_buffers",
    },
    "tetrarch.plugins.rdma": {
        "DmaBuf", "GpuRuntime", "LocalRegion", "MemoryKind", "PeerIdentity", "RdmaBackend", "RdmaHost",
        "RemoteRegion", "export_dmabuf", "gpu_runtime", "probe_in_child", "process_gone", "settle",
    },
    "tetrarch.plugins.allocator": {
        "ENV_CLIENT_ADDR", "ENV_HOST_INDEX", "ENV_SECRET_FILE", "HOST_AGENT_MODULE", "AgentCommand", "AllocRequest",
        "Allocation", "Allocator", "AllocatorError", "ExitInfo", "LaunchVar", "LocalAllocation", "LocalAllocator",
        "WatchedProcess", "process_gone", "source_ip_toward", "spawn_watched",
    },
}


@pytest.mark.parametrize("module", ["tetrarch", "tetrarch.plugins", "tetrarch.plugins.transport",
                                    "tetrarch.plugins.rdma", "tetrarch.plugins.allocator", "tetrarch.job",
                                    "tetrarch.job.spmd", "tetrarch.spmd"])
def test_all_lists_exactly_the_exported_names_and_each_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    lazy = set(getattr(mod, "_EXPORTS", {})) | set(getattr(mod, "_LAZY", {}))
    assert lazy <= set(mod.__all__), f"{module}: exported but missing from __all__: {sorted(lazy - set(mod.__all__))}"
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{module}.{name} does not resolve"


@pytest.mark.parametrize("module", sorted(PLUGIN_API))
def test_the_plugin_api_is_what_its_version_says(module: str) -> None:
    from tetrarch.plugins import PLUGIN_API_VERSION as current

    names = set(importlib.import_module(module).__all__)
    assert (current, names) == (PLUGIN_API_VERSION, PLUGIN_API[module]), (
        f"{module} changed: added {sorted(names - PLUGIN_API[module])}, removed {sorted(PLUGIN_API[module] - names)}. "
        "Raise tetrarch.plugins.PLUGIN_API_VERSION by its rule (a new name: MINOR; a removed or renamed one: MAJOR) "
        "and update PLUGIN_API and PLUGIN_API_VERSION here"
    )


@pytest.mark.parametrize("module", sorted(PLUGIN_API))
def test_every_class_and_function_of_the_plugin_api_says_what_it_does(module: str) -> None:
    mod = importlib.import_module(module)
    bare = [name for name in mod.__all__
            if (inspect.isclass(obj := getattr(mod, name)) or inspect.isfunction(obj))
            and len((obj.__doc__ or "").strip()) < 20]
    assert not bare, f"{module}: no docstring (what it guarantees and raises): {bare}"
