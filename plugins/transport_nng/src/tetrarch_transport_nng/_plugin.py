"""Entry point module (featherweight: pynng is never imported here)."""

from __future__ import annotations

from collections.abc import Sequence

from tetrarch.plugins import (
    BackendKind,
    BackendSpec,
    ProbeResult,
    hookimpl,
    not_implemented_yet,
    python_library_found,
)

ALTERNATIVE = "use the builtin 'ipc' or 'tcp' transport"


def probe() -> ProbeResult:
    """Whether pynng is installed (found without importing it), then the honest state."""
    found = python_library_found("pynng", "pynng")
    if found is None:
        return ProbeResult.no("pynng is not installed", 'pip install pynng (or pip install "tetrarch[nng]")')
    return not_implemented_yet(found, "nng transport", ALTERNATIVE)


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
