"""Which local address an IP-based libfabric provider's endpoint binds (issue 28, item 3).

Left to itself, libfabric 1.17's ``tcp`` provider (under ``ofi_rxm``) listens on an
interface it picks, the machine's external one on a typical VM, so every registered buffer
was reachable from the network. Like tetrarch's transports, the endpoint binds loopback
unless the process's allocation spans hosts; then the interface of the process's own
(routable) kernel address, which its launcher pinned to the interface that routes to the
other hosts. The address is handed to ``fi_getinfo`` as the node with ``FI_SOURCE``.
``FI_TCP_IFACE`` in the environment (the user's explicit choice) is left to the provider.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

from tetrarch.plugins import advertised_host

__all__ = ["IP_PROVIDERS", "LOOPBACK", "bind_node"]

LOOPBACK = "127.0.0.1"
#: Core providers (the part before ``;ofi_rxm``/``;ofi_rxd``) addressed by IPv4 socket addresses.
IP_PROVIDERS = frozenset({"tcp", "sockets", "udp", "net"})


def bind_node(provider: str, own_address: str) -> str | None:
    """The node to bind ``provider``'s endpoint to, for a process whose kernel listens at
    ``own_address``; None: no node (not an IP provider, or ``FI_TCP_IFACE`` is set). Never raises.

    Loopback unless ``own_address`` has a non-loopback IP host (the allocation spans hosts):
    then that IP, or for a wildcard the address this host advertises.
    """
    if provider.split(";", 1)[0] not in IP_PROVIDERS or os.environ.get("FI_TCP_IFACE"):
        return None
    try:
        host = urlsplit(own_address).hostname or ""
        ip = ipaddress.ip_address(host)
    except ValueError:
        return LOOPBACK  # ipc://, a name, or garbage: a single host's transport
    if ip.version != 4 or ip.is_loopback:
        return LOOPBACK
    return advertised_host(str(ip)) if ip.is_unspecified else str(ip)
