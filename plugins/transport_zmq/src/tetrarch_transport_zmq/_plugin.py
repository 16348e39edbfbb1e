"""Entry point module (featherweight: pyzmq is never imported here)."""

from __future__ import annotations

from collections.abc import Sequence

from tetrarch.plugins import Capability, TransportSpec, hookimpl, library_probe

#: The plugin API version this plugin was written for (tetrarch.plugins.PLUGIN_API_VERSION).
tetrarch_plugin_api = "1.2"

probe = library_probe("zmq", "pyzmq", "zmq")


@hookimpl
def tetrarch_transports() -> Sequence[TransportSpec]:
    return [
        TransportSpec(
            "zmq",
            "tetrarch_transport_zmq._zmq:ZmqTransport",
            probe=probe,
            priority=5,
            extra="zmq",
            summary="ZeroMQ sockets (pyzmq)",
            schemes=("tcp", "ipc"),
            capabilities=frozenset({Capability.SAME_HOST, Capability.MULTI_HOST}),
        )
    ]
