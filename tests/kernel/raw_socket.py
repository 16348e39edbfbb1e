"""A plain socket to a tetrarch listener, for tests that play an unauthenticated peer."""

from __future__ import annotations

import socket

from tetrarch.testing import scaled


def raw_connect(address: str, timeout: float = 5.0) -> socket.socket:
    """A connected socket to ``ipc://@name`` or ``tcp://host:port`` (``timeout`` nominal seconds, scaled).

    A qualified scheme (``nng+ipc://@name``) dials the same socket: the peer speaks whatever
    the backend's wire is, and this socket plays someone who does not.
    """
    scheme, sep, rest = address.partition("://")
    address = f"{scheme.rpartition('+')[2]}{sep}{rest}"
    if address.startswith("ipc://@"):
        s = socket.socket(socket.AF_UNIX)
        s.connect("\0" + address[len("ipc://@"):])
    else:
        host, port = address[len("tcp://"):].rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
    s.settimeout(scaled(timeout))
    return s
