"""Which local address reaches another host: for processes whose allocation spans hosts.

A wildcard listener (``tcp://0.0.0.0:0``) accepts on every interface, but the address it
advertises must be one the peers can reach. The host name often resolves to loopback
(containers, network namespaces), so a launched process pins its listener to the
source address the kernel uses toward the process that started it.
"""

from __future__ import annotations

import re
import socket

__all__ = ["advertised_host", "host_of", "pin_host", "routable_ip", "source_ip_toward"]

_HOST = re.compile(r"^(?P<scheme>[a-z0-9+]*://)(?P<host>\[[^\]]*\]|[^:/]+):(?P<port>\d+)$")


def host_of(address: str | None) -> str | None:
    """The host part of ``scheme://host:port`` (brackets of IPv6 stripped), else ``None``."""
    match = _HOST.match(address or "")
    return match["host"].strip("[]") if match else None


def source_ip_toward(host: str | None) -> str | None:
    """The local IPv4 address the kernel would send from to reach ``host``, or ``None`` when there is no route.

    No packet is sent (a UDP socket is only connected).
    """
    if not host:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((host, 9))
            return str(sock.getsockname()[0])
    except OSError:
        return None


def pin_host(address: str, host: str | None) -> str:
    """``address`` with its wildcard host (``0.0.0.0``) replaced by ``host``; unchanged otherwise."""
    match = _HOST.match(address)
    if not host or match is None or match["host"] not in ("0.0.0.0", "*"):
        return address
    return f"{match['scheme']}{host}:{match['port']}"


def routable_ip() -> str:
    """A non-loopback IPv4 address of this host (never 127.x, see Monarch #4394); 127.0.0.1 if it has none."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        infos = []
    for info in infos:
        ip = str(info[4][0])  # an IPv4 sockaddr: (host, port)
        if not ip.startswith("127."):
            return ip
    return "127.0.0.1"


def advertised_host(bound_host: str) -> str:
    """The host peers should dial for a socket bound to ``bound_host`` (a routable IP for a wildcard)."""
    if bound_host in ("0.0.0.0", "::", "*"):
        return routable_ip()
    return bound_host
