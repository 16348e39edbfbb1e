"""The hooks a tetrarch plugin implements (pluggy project name ``tetrarch``).

A plugin distribution declares one entry point in the group ``tetrarch`` naming a
featherweight module (no heavy imports at module level) that implements some of:

.. code-block:: python

    from tetrarch.plugins import hookimpl, BackendSpec, BackendKind

    @hookimpl
    def tetrarch_transports():
        return [BackendSpec(BackendKind.TRANSPORT, "zmq", "my_pkg._zmq:ZmqTransport", ...)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pluggy

from .._config import Setting
from ._specs import BackendKind, BackendSpec

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "tetrarch"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def tetrarch_transports() -> Sequence[BackendSpec]:
    """Return the transports this plugin provides."""


@hookspec
def tetrarch_rdma_backends() -> Sequence[BackendSpec]:
    """Return the RDMA backends this plugin provides."""


@hookspec
def tetrarch_allocators() -> Sequence[BackendSpec]:
    """Return the allocators this plugin provides."""


@hookspec(firstresult=True)
def tetrarch_select_backend(
    kind: BackendKind, candidates: Sequence[BackendSpec], request: Mapping[str, object]
) -> BackendSpec | None:
    """Pick one of ``candidates`` (all available) for ``request``; None defers.

    Only consulted when the user named no backend (argument, environment variable or
    qualified address scheme). Core's default policy runs last: highest priority.
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

        tetrarch_plugin_api = "1.1"

        FOO_DEPTH = Setting("foo_depth", "TETRARCH_FOO_DEPTH", int, 4,
                            "requests the foo backend keeps in flight")

        @hookimpl
        def tetrarch_settings():
            return [FOO_DEPTH]

        # anywhere in the backend: FOO_DEPTH() is the value now (code > environment > default)
    """
