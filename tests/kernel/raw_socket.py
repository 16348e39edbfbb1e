"""A plain socket to a tetrarch listener, for tests that play an unauthenticated peer."""

from __future__ import annotations

import socket

from tetrarch.testing import scaled


def raw_connect(address: str, timeout: float = 5.0) -> socket.socket:
    """A connected socket to ``ipc://@name``, ``ipc:///path`` or ``tcp://host:port``.

    ``timeout`` is in nominal seconds (scaled)."""
    if address.startswith("ipc://"):
        path = address[len("ipc://"):]
        s = socket.socket(socket.AF_UNIX)
        s.connect("\0" + path[1:] if path.startswith("@") else path)
    else:
        host, port = address[len("tcp://"):].rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
    s.settimeout(scaled(timeout))
    return s
