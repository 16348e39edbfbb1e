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

import pluggy

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
