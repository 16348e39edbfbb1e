"""Mutual HMAC challenge/response run on every new connection.

Nothing a peer sends is unpickled before it proved it holds the allocation's secret:
until the handshake completes the receiving side accepts only messages of a few
hundred bytes, compares them as raw bytes, and closes the connection on the first
deviation. Both sides prove knowledge of the secret (the dialer first), so a client
never unpickles replies from an impostor listening on a reused address either.

    listener -> dialer : [MAGIC, nonce_l]
    dialer -> listener : [MAGIC, nonce_d, HMAC(secret, "dialer" | addr | nonce_l | nonce_d), addr]
    listener -> dialer : [HMAC(secret, "listener" | nonce_d | nonce_l)]
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
import threading

from .._errors import TetrarchError

__all__ = ["MAGIC", "PRE_AUTH_LIMIT", "Auth", "AuthError", "Role", "transport_key"]

MAGIC = b"TETRARCH-AUTH/1"
PRE_AUTH_LIMIT = 4096
_NONCE = 32


class AuthError(TetrarchError, ConnectionError):
    """The peer failed the handshake (wrong secret, garbage, or out of order)."""


class Role(enum.Enum):
    LISTENER = "listener"
    DIALER = "dialer"


def transport_key(secret: bytes) -> bytes:
    """The allocation's transport key (``Transport.use_key``): derived from ``secret`` under a
    label of its own, so it can travel where the secret must not (zmq's PLAIN handshake)."""
    return hmac.new(secret, b"tetrarch transport key v1", hashlib.sha256).digest()


def _mac(secret: bytes, label: bytes, a: bytes, b: bytes) -> bytes:
    return hmac.new(secret, label + a + b, hashlib.sha256).digest()


class Auth:
    """Handshake state of one connection (kept in ``Connection.context``)."""

    __slots__ = ("role", "secret", "local_address", "nonce", "peer_nonce", "done", "peer_address", "event", "error")

    def __init__(self, role: Role, secret: bytes, local_address: str) -> None:
        self.role = role
        self.secret = secret
        self.local_address = local_address
        self.nonce = secrets.token_bytes(_NONCE)
        self.peer_nonce = b""
        self.done = False
        self.peer_address = ""
        self.event = threading.Event()
        self.error: str = ""

    def hello(self) -> list[bytes]:
        """The listener's first message."""
        return [MAGIC, self.nonce]

    def step(self, frames: list[memoryview]) -> list[bytes] | None:
        """Consume one handshake message; return the reply to send, if any.

        Raises:
            AuthError: the message is not the expected next step or its MAC is wrong.
        """
        if self.role is Role.DIALER and not self.peer_nonce:
            if len(frames) != 2 or bytes(frames[0]) != MAGIC or len(frames[1]) != _NONCE:
                raise AuthError("peer did not start the tetrarch handshake")
            self.peer_nonce = bytes(frames[1])
            addr = self.local_address.encode()
            mac = _mac(self.secret, b"dialer" + addr, self.peer_nonce, self.nonce)
            return [MAGIC, self.nonce, mac, addr]
        if self.role is Role.DIALER:
            expected = _mac(self.secret, b"listener", self.nonce, self.peer_nonce)
            if len(frames) != 1 or not hmac.compare_digest(bytes(frames[0]), expected):
                raise AuthError("peer failed to prove it holds the allocation's secret")
            self.done = True
            return None
        # listener
        if len(frames) != 4 or bytes(frames[0]) != MAGIC or len(frames[1]) != _NONCE:
            raise AuthError("peer sent garbage instead of the tetrarch handshake")
        self.peer_nonce = bytes(frames[1])
        expected = _mac(self.secret, b"dialer" + bytes(frames[3]), self.nonce, self.peer_nonce)
        if not hmac.compare_digest(bytes(frames[2]), expected):
            raise AuthError("peer does not hold the allocation's secret")
        try:
            self.peer_address = bytes(frames[3]).decode()
        except UnicodeDecodeError:
            raise AuthError("peer sent an undecodable address") from None
        self.done = True
        return [_mac(self.secret, b"listener", self.peer_nonce, self.nonce)]
