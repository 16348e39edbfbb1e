"""Entry point module (featherweight: pynng is never imported here)."""

from __future__ import annotations

from collections.abc import Sequence

from tetrarch.plugins import (
    BackendKind,
    BackendSpec,
    hookimpl,
    pending_library_probe,
)

ALTERNATIVE = "use the builtin 'ipc' or 'tcp' transport"


probe = pending_library_probe("pynng", "pynng", "nng", "nng transport", ALTERNATIVE)


@hookimpl
def tetrarch_transports() -> Sequence[BackendSpec]:
    return [
        BackendSpec(
            BackendKind.TRANSPORT,
            "nng",
            "tetrarch_transport_nng._nng:NngTransport",
            probe=probe,
            priority=4,
            extra="nng",
            summary="nanomsg-next-gen sockets (pynng)",
            schemes=("tcp", "ipc"),
            capabilities=frozenset({"local", "multi-host"}),
        )
    ]
