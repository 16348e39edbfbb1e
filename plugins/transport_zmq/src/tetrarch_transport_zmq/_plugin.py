"""Entry point module (featherweight: pyzmq is never imported here)."""

from __future__ import annotations

from collections.abc import Sequence

from tetrarch.plugins import BackendKind, BackendSpec, hookimpl, library_probe

ALTERNATIVE = "use the builtin 'ipc' or 'tcp' transport"  # for the placeholder factory's error

probe = library_probe("zmq", "pyzmq", "zmq")


@hookimpl
def tetrarch_transports() -> Sequence[BackendSpec]:
    return [
        BackendSpec(
            BackendKind.TRANSPORT,
            "zmq",
            "tetrarch_transport_zmq._zmq:ZmqTransport",
            probe=probe,
            implemented=False,  # the factory is a placeholder: `tetrarch plugins` says so first
            priority=5,
            extra="zmq",
            summary="ZeroMQ sockets (pyzmq)",
            schemes=("tcp", "ipc"),
            capabilities=frozenset({"local", "multi-host"}),
        )
    ]
