"""zmq's own gate in front of the kernel's handshake: ZMTP PLAIN credentials checked by a ZAP handler.

The kernel hands the transport the allocation's key (``Transport.use_key``) before it
listens. Every ROUTER of ours is then a PLAIN server whose ZAP domain is enforced, and every
DEALER presents the key as its PLAIN password: libzmq refuses a peer without it during the
ZMTP handshake, before it reads, counts or buffers a single frame of that peer's messages.
Without the gate, libzmq buffered every frame of a multipart message a stranger never ended
(``ZMQ_MAXMSGSIZE`` bounds a frame, nothing bounds their count) until the stranger hung up.

PLAIN sends the password in the clear: the key is an HMAC of the allocation's secret, not the
secret, so a peer that reads it gets past this gate only, never past the kernel's handshake,
which proves the secret itself on every connection before anything is unpickled. A dialer
whose key the listener refuses sees ``EVENT_HANDSHAKE_FAILED_*`` on its monitor and fails at
once (``_dial``).
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any

import zmq

if TYPE_CHECKING:
    from ._loop import ZmqLoop

__all__ = ["HANDSHAKE_FAILED", "ZapHandler", "password_of", "reply", "secure_client", "secure_server"]

#: Where libzmq sends its authentication requests (RFC 27), in the socket's context.
ENDPOINT = "inproc://zeromq.zap.01"
DOMAIN = b"tetrarch"
USER = b"tetrarch"
#: Monitor events of a handshake the listener refused (a wrong key, or no PLAIN at all).
HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
_MAX_PER_READ = 64


def password_of(key: bytes) -> bytes:
    """The PLAIN password for the transport key ``key`` (printable, at most 255 bytes)."""
    return key.hex().encode()


def secure_server(sock: zmq.Socket[Any]) -> None:
    """Make ``sock`` (a ROUTER, before it binds) accept only peers the ZAP handler admits."""
    sock.setsockopt(zmq.PLAIN_SERVER, 1)
    sock.setsockopt(zmq.ZAP_DOMAIN, DOMAIN)
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no handler answering: refuse, never admit


def secure_client(sock: zmq.Socket[Any], password: bytes) -> None:
    """Make ``sock`` (a DEALER, before it connects) present ``password``."""
    sock.setsockopt(zmq.PLAIN_USERNAME, USER)
    sock.setsockopt(zmq.PLAIN_PASSWORD, password)


def reply(request: list[bytes], password: bytes) -> list[bytes]:
    """The ZAP reply to ``request``: 200 for PLAIN with our user and ``password``, else 400."""
    version, request_id = [*request, b"", b""][:2]
    ok = (len(request) == 8 and version == b"1.0" and request[2] == DOMAIN and request[5] == b"PLAIN"
          and request[6] == USER and hmac.compare_digest(request[7], password))
    status, text = (b"200", b"OK") if ok else (b"400", b"not of this allocation")
    return [b"1.0", request_id, status, text, b"", b""]


class ZapHandler:
    """Answers libzmq's authentication requests for one context, on the loop's reading thread."""

    def __init__(self, loop: ZmqLoop, password: bytes) -> None:
        self._loop = loop
        self._password = password
        self._sock: zmq.Socket[Any] | None = None

    def start(self) -> None:
        """Bind the handler and watch it (I/O thread; before any listener binds)."""
        sock = self._loop.ctx.socket(zmq.REP)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(ENDPOINT)
        self._sock = sock
        self._loop.watch(sock, self.answer)

    def answer(self) -> bool:
        """Answer the requests waiting; True if it left some for the loop's next turn."""
        sock = self._sock
        if sock is None or sock.closed:
            return False
        for _ in range(_MAX_PER_READ):
            try:
                request = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return False
            sock.send_multipart(reply(request, self._password))
        return True
