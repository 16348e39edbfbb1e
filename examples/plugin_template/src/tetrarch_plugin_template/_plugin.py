"""The entry point module: featherweight (``tetrarch.plugins`` and the standard library only).

``tetrarch plugins`` and backend selection import it in every process that looks for
backends; the heavy parts load through the factory strings, when a backend is used.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from tetrarch.plugins import AllocatorSpec, Capability, ProbeResult, TransportSpec, hookimpl

#: The plugin API version this plugin was written for: a literal, checked against
#: ``tetrarch.plugins.PLUGIN_API_VERSION`` when tetrarch loads the plugin (same MAJOR, and a
#: MINOR no newer than tetrarch's, or ``tetrarch plugins`` lists it ``incompatible``). Raise it
#: when the plugin starts to use a name of a newer plugin API; never assign PLUGIN_API_VERSION.
tetrarch_plugin_api = "1.2"


def transport_probe() -> ProbeResult:
    """Fast, side-effect free, never raises: is there anything this transport needs?"""
    if not hasattr(socket.socket, "sendmsg"):
        return ProbeResult.no("socket.sendmsg is missing on this platform", "use the builtin 'tcp' transport")
    return ProbeResult.yes("TCP sockets, a thread per connection")


def allocator_probe() -> ProbeResult:
    """The sandbox allocator needs a writable temporary directory for the hosts' scratch folders."""
    import tempfile

    directory = tempfile.gettempdir()
    if not os.access(directory, os.W_OK | os.X_OK):
        return ProbeResult.no(f"the temporary directory {directory} is not writable", "set TMPDIR")
    return ProbeResult.yes(f"host agents in scratch folders under {directory}")


@hookimpl
def tetrarch_transports() -> Sequence[TransportSpec]:
    return [
        TransportSpec(
            "threaded",
            "tetrarch_plugin_template._transport:ThreadedTransport",  # imported only when used
            probe=transport_probe,
            priority=1,  # below the builtin ipc (20) and tcp (10): used when chosen
            summary="TCP sockets, a thread per connection (template)",
            schemes=("tcp",),  # bare address schemes: it serves tcp:// (and threaded+tcp://) addresses
            capabilities=frozenset({Capability.SAME_HOST, Capability.MULTI_HOST}),
        )
    ]


@hookimpl
def tetrarch_allocators() -> Sequence[AllocatorSpec]:
    return [
        AllocatorSpec(
            "sandbox",
            "tetrarch_plugin_template._allocator:SandboxAllocator",
            probe=allocator_probe,
            priority=1,  # below core's local allocator: used when chosen
            summary="host agents on this machine, each in its own scratch folder (template)",
            capabilities=frozenset({Capability.SAME_HOST}),  # its host agents run on this machine
        )
    ]
