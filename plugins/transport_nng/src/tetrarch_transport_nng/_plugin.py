"""Entry point module (featherweight: pynng is never imported here)."""

from __future__ import annotations

from collections.abc import Sequence

from tetrarch.plugins import Capability, TransportSpec, hookimpl, library_probe

#: The plugin API version this plugin was written for (tetrarch.plugins.PLUGIN_API_VERSION).
tetrarch_plugin_api = "1.2"

probe = library_probe("pynng", "pynng", "nng")


@hookimpl
def tetrarch_transports() -> Sequence[TransportSpec]:
    return [
        TransportSpec(
            "nng",
            "tetrarch_transport_nng._nng:NngTransport",
            probe=probe,
            priority=4,
            extra="nng",
            summary="nanomsg-next-gen sockets (pynng)",
            schemes=("tcp", "ipc"),
            capabilities=frozenset({Capability.SAME_HOST, Capability.MULTI_HOST}),
        )
    ]
