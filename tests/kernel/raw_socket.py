"""A plain socket to a tetrarch listener, for tests that play an unauthenticated peer."""

from __future__ import annotations

import socket

from tetrarch.testing import scaled


def raw_connect(address: str, timeout: float = 5.0) -> socket.socket:
    """A connected socket to ``ipc://@name``, ``ipc:///path`` or ``tcp://host:port`` (``timeout`` nominal
    seconds, scaled). A qualified scheme (``zmq+tcp://...``, a plugin transport's listener) is dialed as
    its base scheme: the peer is then a plain socket that speaks none of that library's protocol."""
    scheme, _, rest = address.partition("://")
    base = scheme.rpartition("+")[2]
    if base == "ipc":
        s = socket.socket(socket.AF_UNIX)
        s.connect("\0" + rest[1:] if rest.startswith("@") else rest)
    elif base == "tcp":
        host, port = rest.rsplit(":", 1)
        s = socket.create_connection((host.strip("[]"), int(port)))
    else:
        raise ValueError(f"raw_connect cannot dial {address!r}: neither ipc:// nor tcp://")
    s.settimeout(scaled(timeout))
    return s
