"""Everything a tetrarch plugin author needs.

A plugin is its own distribution. It declares one entry point in the group
``tetrarch`` naming a *featherweight* module: no import of pyzmq, pynng, pyverbs or
torch at module level, so ``tetrarch plugins`` and backend selection stay fast.

``pyproject.toml``::

    [project]
    name = "tetrarch-transport-foo"
    dependencies = ["tetrarch>=0.1", "foo-bindings"]

    [project.entry-points.tetrarch]
    foo = "tetrarch_transport_foo._plugin"

``tetrarch_transport_foo/_plugin.py``::

    from tetrarch.plugins import Capability, ProbeResult, TransportSpec, hookimpl, python_library_found

    tetrarch_plugin_api = "1.2"             # the plugin API version it was written for: a literal

    def _probe() -> ProbeResult:            # fast, side-effect free, never raises
        found = python_library_found("foo", "foo-bindings")
        if found is None:
            return ProbeResult.no("foo-bindings is not installed", "pip install foo-bindings")
        return ProbeResult.yes(found)

    @hookimpl
    def tetrarch_transports():
        return [TransportSpec("foo", "tetrarch_transport_foo._foo:FooTransport",
                              probe=_probe, priority=5, schemes=("tcp",),
                              capabilities=frozenset({Capability.SAME_HOST, Capability.MULTI_HOST}))]

``tetrarch_transport_foo/_foo.py`` then implements :class:`Transport` (imported
only when the backend is used). Users pick it with ``TETRARCH_TRANSPORT=foo``, an
address such as ``foo+tcp://host:port``, or by priority; ``tetrarch plugins`` shows
its status. A ``tetrarch_select_backend`` hookimpl may replace the default policy.

**Typed contracts** (plugin API 1.2): each kind has its spec type, with only the
fields that kind has: :class:`TransportSpec` (``schemes``: the bare address schemes it
serves, ``tcp`` and ``ipc``, never ``foo+tcp``), :class:`RdmaBackendSpec` and
:class:`AllocatorSpec`, over their common base :class:`BackendSpec`. Capabilities are
:class:`Capability` members (``SAME_HOST``, ``MULTI_HOST``). A policy hook gets a frozen
:class:`SelectionRequest` (``request.require``, ``request.allow_fallback``, ...).
:class:`BackendNotFound` and :class:`BackendUnavailable` carry ``kind``, ``name``,
``reason`` and ``remedy``; a :class:`BackendStatus` row has ``reason`` and ``remedy``.
Still accepted, for plugins written for 1.0/1.1: ``BackendSpec(BackendKind.TRANSPORT,
...)``, the capability ``"local"`` (normalised to ``SAME_HOST``), a request read as a
mapping (``request["require"]``, deprecated: it warns), ``BackendStatus.hint`` and
``PluginRecord.hint`` (deprecated aliases of their ``remedy``).

Code that needs a backend asks by kind: :func:`get_transport` returns a
:class:`Transport`, :func:`get_allocator` an :class:`Allocator`. RDMA backends implement
:class:`RdmaBackend`; ``tetrarch.rdma`` selects and starts them per transfer.

The runtime interfaces (:class:`Transport`, :class:`Allocator`, ...) load lazily so
importing this module stays cheap.

**The complete API.** A plugin imports from ``tetrarch.plugins`` and its submodules,
the kit of each kind, and from tetrarch's other public modules (``tetrarch``,
``tetrarch.config``, ``tetrarch.job``, ``tetrarch.rdma``, ``tetrarch.testing``), never
from a ``tetrarch._*`` module (tetrarch's own ``make lint`` refuses that in its plugins
and examples):

:mod:`tetrarch.plugins.transport`
    the transport interfaces plus the kernel's framing helpers (``header``,
    ``receive_buffers``, ...), its loops and pre-authentication bounds;
:mod:`tetrarch.plugins.rdma`
    the RDMA backend interfaces plus GPU memory helpers (``gpu_runtime``, ``export_dmabuf``);
:mod:`tetrarch.plugins.allocator`
    the allocator interfaces plus ``spawn_watched``, the host agent's module and
    variables, and ``LocalAllocator`` (the ``local`` allocator, from ``tetrarch-alloc-local``).

Here, for every kind: the records and hooks above, the registry (:class:`Registry`,
:func:`get_registry`, :class:`PluginSource` to register a plugin object in a test),
:class:`Setting` (a plugin's own setting, declared by the ``tetrarch_settings`` hook),
:func:`setting` (a tetrarch setting a backend reads, e.g. ``setting("stop_timeout")``),
:func:`get_logger` and :data:`PLUGIN_API_VERSION`.

**The plugin API version.** :data:`PLUGIN_API_VERSION` (``"MAJOR.MINOR"``) is the
version of this API. MINOR grows when it grows compatibly (a new name, an optional
hook, a field or method with a default); MAJOR grows when a plugin written for the old
one could break (a name removed, a hook's or record's required arguments changed, a new
abstract method, a stricter contract). A plugin declares the version it was written
for as ``tetrarch_plugin_api = "1.2"`` in its entry point module; it loads when its
MAJOR is this one's and its MINOR not newer, else ``tetrarch plugins`` lists it
``incompatible`` with both versions and the fix, and it is not loaded. A plugin that
declares nothing is taken as ``"1.0"`` (it predates declarations): it loads under 1.x
with a note in ``tetrarch plugins``, and ``TETRARCH_PLUGINS_STRICT=1`` refuses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._config import Setting
from .._lazy import lazy_exports
from .._log import get_logger
from .._plugins._api import PLUGIN_API_VERSION
from .._plugins._errors import BackendNotFound, BackendUnavailable, PluginLoadError
from .._plugins._helpers import (
    library_probe,
    module_present,
    not_implemented_factory,
    probe_in_child,
    python_library_found,
    setting,
)
from .._plugins._hookspecs import hookimpl, hookspec
from .._plugins._loader import PluginRecord, PluginSource, PluginState
from .._plugins._registry import Registry, get_allocator, get_registry, get_transport
from .._plugins._request import SelectionRequest
from .._plugins._specs import (
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

_LAZY = {
    "Transport": "tetrarch._transport._base",
    "Connection": "tetrarch._transport._base",
    "Listener": "tetrarch._transport._base",
    "ConnectionHandler": "tetrarch._transport._base",
    "ConnectionClosed": "tetrarch._transport._base",
    "HandshakeRefused": "tetrarch._transport._base",
    "TransportError": "tetrarch._transport._base",
    "PreAuthLimits": "tetrarch._transport._limits",
    "connection_cap": "tetrarch._transport._limits",
    "CallQueue": "tetrarch._transport._call_queue",
    "IoLoop": "tetrarch._transport._loop",
    "LeaderLoop": "tetrarch._transport._loop",
    "QualifiedAddress": "tetrarch._transport._qualified",
    "parse_qualified": "tetrarch._transport._qualified",
    "fresh_ipc_name": "tetrarch._transport._qualified",
    "advertised_host": "tetrarch._transport._route",
    "Allocator": "tetrarch._runtime.plumbing._alloc",
    "Allocation": "tetrarch._runtime.plumbing._alloc",
    "AllocRequest": "tetrarch._runtime.plumbing._alloc",
    "AgentCommand": "tetrarch._runtime.plumbing._alloc",
    "AllocatorError": "tetrarch._runtime.plumbing._alloc",
    "spawn_watched": "tetrarch._runtime.plumbing._spawn",
    "RdmaBackend": "tetrarch._rdma._backend",
    "RdmaHost": "tetrarch._rdma._backend",
    "LocalRegion": "tetrarch._rdma._backend",
    "RemoteRegion": "tetrarch._rdma._backend",
    "PeerIdentity": "tetrarch._rdma._backend",
    "MemoryKind": "tetrarch._rdma._backend",
    "settle": "tetrarch._rdma._backend",
    "ExitInfo": "tetrarch._runtime.plumbing._spawn",
    "WatchedProcess": "tetrarch._runtime.plumbing._spawn",
    "process_gone": "tetrarch._runtime.plumbing._proc_state",
    "helper_thread_policy": "tetrarch._transport._sched",
    "batch_helper_threads": "tetrarch._transport._sched",
}

__all__ = [
    "PLUGIN_API_VERSION",
    "AgentCommand",
    "AllocRequest",
    "Allocation",
    "Allocator",
    "AllocatorError",
    "AllocatorSpec",
    "BackendKind",
    "BackendNotFound",
    "BackendSpec",
    "BackendStatus",
    "BackendUnavailable",
    "CallQueue",
    "Capability",
    "Connection",
    "ConnectionClosed",
    "ConnectionHandler",
    "ExitInfo",
    "HandshakeRefused",
    "IoLoop",
    "LeaderLoop",
    "Listener",
    "LocalRegion",
    "MemoryKind",
    "PeerIdentity",
    "PluginLoadError",
    "PluginRecord",
    "PluginSource",
    "PluginState",
    "PreAuthLimits",
    "ProbeResult",
    "QualifiedAddress",
    "RdmaBackend",
    "RdmaBackendSpec",
    "RdmaHost",
    "Registry",
    "RemoteRegion",
    "SelectionRequest",
    "Setting",
    "Status",
    "Transport",
    "TransportError",
    "TransportSpec",
    "WatchedProcess",
    "advertised_host",
    "batch_helper_threads",
    "connection_cap",
    "fresh_ipc_name",
    "get_allocator",
    "get_logger",
    "get_registry",
    "get_transport",
    "helper_thread_policy",
    "hookimpl",
    "hookspec",
    "library_probe",
    "module_present",
    "not_implemented_factory",
    "parse_qualified",
    "probe_in_child",
    "process_gone",
    "python_library_found",
    "setting",
    "settle",
    "spawn_watched",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY, __all__)


if TYPE_CHECKING:  # pragma: no cover
    from .._rdma._backend import LocalRegion, MemoryKind, PeerIdentity, RdmaBackend, RdmaHost, RemoteRegion, settle
    from .._runtime.plumbing._alloc import AgentCommand, Allocation, Allocator, AllocatorError, AllocRequest
    from .._runtime.plumbing._proc_state import process_gone
    from .._runtime.plumbing._spawn import ExitInfo, WatchedProcess, spawn_watched
    from .._transport._base import (
        Connection,
        ConnectionClosed,
        ConnectionHandler,
        HandshakeRefused,
        Listener,
        Transport,
        TransportError,
    )
    from .._transport._call_queue import CallQueue
    from .._transport._limits import PreAuthLimits, connection_cap
    from .._transport._loop import IoLoop, LeaderLoop
    from .._transport._qualified import QualifiedAddress, fresh_ipc_name, parse_qualified
    from .._transport._route import advertised_host
    from .._transport._sched import batch_helper_threads, helper_thread_policy
