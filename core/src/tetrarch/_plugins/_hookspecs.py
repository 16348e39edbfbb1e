"""The hooks a tetrarch plugin implements (pluggy project name ``tetrarch``).

A plugin distribution declares one entry point in the group ``tetrarch`` naming a
featherweight module (no heavy imports at module level) that implements some of the
hooks below. Each hook's docstring holds a complete minimal plugin module using it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pluggy

from .._config import Setting
from ._request import SelectionRequest
from ._specs import AllocatorSpec, BackendKind, BackendSpec, RdmaBackendSpec, TransportSpec

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "tetrarch"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def tetrarch_transports() -> Sequence[TransportSpec]:
    """Return the transports this plugin provides, each a :class:`tetrarch.plugins.TransportSpec`.

    ``schemes`` are the bare schemes of the addresses it serves (``tcp`` for
    ``tcp://host:port``); users may also qualify them with its name (``foo+tcp://...``).
    The factory's module implements :class:`tetrarch.plugins.transport.Transport`. A
    complete minimal plugin module:

    .. code-block:: python

        from tetrarch.plugins import Capability, TransportSpec, hookimpl, library_probe

        tetrarch_plugin_api = "1.2"

        probe = library_probe("foo", "foo-bindings")   # yes("foo-bindings 1.0") or no(reason, remedy)

        @hookimpl
        def tetrarch_transports():
            return [TransportSpec("foo", "tetrarch_transport_foo._foo:FooTransport", probe=probe, priority=5,
                                  schemes=("tcp", "ipc"),
                                  capabilities=frozenset({Capability.SAME_HOST, Capability.MULTI_HOST}))]
    """


@hookspec
def tetrarch_rdma_backends() -> Sequence[RdmaBackendSpec]:
    """Return the RDMA backends this plugin provides, each a :class:`tetrarch.plugins.RdmaBackendSpec`.

    The factory's module implements :class:`tetrarch.plugins.rdma.RdmaBackend`. A
    complete minimal plugin module:

    .. code-block:: python

        import os

        from tetrarch.plugins import Capability, ProbeResult, RdmaBackendSpec, hookimpl

        tetrarch_plugin_api = "1.2"

        def probe() -> ProbeResult:                    # fast, side-effect free, never raises
            if not os.path.exists("/dev/foo0"):
                return ProbeResult.no("no foo device (/dev/foo0)", "load the foo kernel module")
            return ProbeResult.yes("foo device /dev/foo0")

        @hookimpl
        def tetrarch_rdma_backends():
            return [RdmaBackendSpec("foo", "tetrarch_rdma_foo._foo:FooRdmaBackend", probe=probe, priority=80,
                                    capabilities=frozenset({Capability.SAME_HOST, Capability.MULTI_HOST}))]
    """


@hookspec
def tetrarch_allocators() -> Sequence[AllocatorSpec]:
    """Return the allocators this plugin provides, each a :class:`tetrarch.plugins.AllocatorSpec`.

    Its capabilities say where its host agents run: ``SAME_HOST`` (this machine;
    ``this_host()`` may use it), ``MULTI_HOST`` (other hosts; ``Allocator.spans_hosts``).
    The factory's module implements :class:`tetrarch.plugins.allocator.Allocator`. A
    complete minimal plugin module:

    .. code-block:: python

        import shutil

        from tetrarch.plugins import AllocatorSpec, Capability, ProbeResult, hookimpl

        tetrarch_plugin_api = "1.2"

        def probe() -> ProbeResult:
            if shutil.which("foo-submit") is None:
                return ProbeResult.no("foo-submit not on PATH", "install the foo scheduler's client tools")
            return ProbeResult.yes("foo-submit found")

        @hookimpl
        def tetrarch_allocators():
            return [AllocatorSpec("foo", "tetrarch_alloc_foo._foo:FooAllocator", probe=probe,
                                  capabilities=frozenset({Capability.MULTI_HOST}))]
    """


@hookspec(firstresult=True)
def tetrarch_select_backend(
    kind: BackendKind, candidates: Sequence[BackendSpec], request: SelectionRequest
) -> BackendSpec | None:
    """Pick one of ``candidates`` (all available) for ``request``; None defers.

    Only consulted when the user named no backend (argument, setting or qualified
    address scheme). ``request`` is a frozen :class:`tetrarch.plugins.SelectionRequest`
    (``request.kind`` is ``kind``; ``request.require``, the capabilities the caller needs:
    return a candidate having them, or None). The first hook returning a candidate wins;
    core's default policy runs last: the highest priority having ``request.require``.
    A complete minimal plugin module:

    .. code-block:: python

        from tetrarch.plugins import BackendKind, hookimpl

        tetrarch_plugin_api = "1.2"

        @hookimpl
        def tetrarch_select_backend(kind, candidates, request):
            \"\"\"Site policy: host agents go through the 'sandbox' allocator when it is usable.\"\"\"
            if kind is not BackendKind.ALLOCATOR:
                return None                            # defer: other kinds are not this policy's business
            return next((c for c in candidates
                         if c.name == "sandbox" and request.require <= c.capabilities), None)
    """


@hookspec
def tetrarch_settings() -> Sequence[Setting[Any]]:
    """Return the settings this plugin's backends read, each a :class:`tetrarch.plugins.Setting`.

    They are tetrarch settings like core's: set from code with ``tetrarch.configure()`` /
    ``configured()`` or by their ``TETRARCH_<KEY>`` environment variable, passed to the procs
    spawned afterwards (unless ``propagate=False``), listed by ``tetrarch config`` under the
    plugin's distribution. Declare each once, at module level of the featherweight plugin
    module, and read it by calling it; a key core declares makes the plugin broken. A
    complete minimal plugin module:

    .. code-block:: python

        from tetrarch.plugins import Setting, hookimpl

        tetrarch_plugin_api = "1.2"

        FOO_DEPTH = Setting("foo_depth", "TETRARCH_FOO_DEPTH", int, 4,
                            "requests the foo backend keeps in flight")

        @hookimpl
        def tetrarch_settings():
            return [FOO_DEPTH]

        # anywhere in the backend: FOO_DEPTH() is the value now (code > environment > default)
    """
