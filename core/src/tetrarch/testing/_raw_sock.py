"""Raw sockets against a listener, as a stranger (or a test) sees it: dial, and tell when it was closed.

No pytest here: usable from tests, kits and the programs they start.
"""

from __future__ import annotations

import select
import socket
import time

__all__ = ["closed_now", "raw_sockaddr", "still_open"]


def raw_sockaddr(address: str) -> tuple[int, object] | None:
    """``(family, sockaddr)`` for tcp/ipc-like addresses a raw socket can dial, else None.

    Takes plain (``tcp://h:p``, ``ipc://@name``, ``ipc:///path``) and qualified
    (``zmq+tcp://...``, ``nng+ipc://...``) addresses.
    """
    scheme, sep, rest = address.partition("://")
    if not sep:
        return None
    base = scheme.rsplit("+", 1)[-1]
    if base == "tcp":
        host, colon, port = rest.rpartition(":")
        if not colon or not port.isdigit():
            return None
        if host.startswith("["):
            return socket.AF_INET6, (host.strip("[]"), int(port))
        return socket.AF_INET, (host or "127.0.0.1", int(port))
    if base == "ipc" and rest:
        return socket.AF_UNIX, ("\0" + rest[1:]) if rest.startswith("@") else rest
    return None


def closed_now(sock: socket.socket) -> bool:
    """Whether the peer has closed ``sock`` already; what it sent is read and dropped. Does not wait.

    Leaves ``sock`` non-blocking.
    """
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True
    return True


def still_open(socks: list[socket.socket], timeout: float) -> list[int]:
    """Indexes of ``socks`` the peer has not closed after waiting up to ``timeout`` s for all of them.

    Polls every socket (``select`` on those still open), so it returns as soon as all are closed.
    """
    deadline = time.monotonic() + timeout
    open_ = list(range(len(socks)))
    while open_:
        open_ = [i for i in open_ if not closed_now(socks[i])]
        left = deadline - time.monotonic()
        if not open_ or left <= 0:
            break
        select.select([socks[i] for i in open_[:512]], [], [], min(left, 0.05))
    return open_
