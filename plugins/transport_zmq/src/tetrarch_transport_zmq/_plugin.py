"""Entry point module (featherweight: pyzmq is never imported here)."""

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
    """Whether pyzmq is installed (found without importing it), then the honest state."""
    found = python_library_found("zmq", "pyzmq")
    if found is None:
        return ProbeResult.no("pyzmq is not installed", 'pip install pyzmq (or pip install "tetrarch[zmq]")')
    return not_implemented_yet(found, "zmq transport", ALTERNATIVE)


@hookimpl
def tetrarch_transports() -> Sequence[BackendSpec]:
    return [
        BackendSpec(
            BackendKind.TRANSPORT,
            "zmq",
            "tetrarch_transport_zmq._zmq:ZmqTransport",
            probe=probe,
            priority=5,
            extra="zmq",
            summary="ZeroMQ sockets (pyzmq)",
            schemes=("tcp", "ipc"),
            capabilities=frozenset({"local", "multi-host"}),
        )
    ]
