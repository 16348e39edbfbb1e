"""Mutual HMAC challenge/response run on every new connection.

Nothing a peer sends is unpickled before it proved it holds the allocation's secret:
until the handshake completes the receiving side accepts only messages of a few
hundred bytes, compares them as raw bytes, and closes the connection on the first
deviation. Both sides prove knowledge of the secret (the dialer first), so a client
never unpickles replies from an impostor listening on a reused address either.

    listener -> dialer : [MAGIC, nonce_l]
    dialer -> listener : [MAGIC, nonce_d, HMAC(secret, "dialer" | addr | info_d | nonce_l | nonce_d), addr, info_d]
    listener -> dialer : [HMAC(secret, "listener" | info_l | nonce_d | nonce_l), info_l]

``info`` is what a peer says of itself once it proved the secret (:class:`PeerInfo`): its pid,
the key of the memory it can share (:func:`tetrarch._runtime.plumbing._segments.host_key`; empty
where it shares none) and the GPUs whose CUDA IPC handles it opens. The MACs cover it, so nobody
in between can make two processes believe they share a host.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
import threading
from typing import NamedTuple

from .._errors import TetrarchError

__all__ = ["MAGIC", "PRE_AUTH_LIMIT", "Auth", "AuthError", "PeerInfo", "Role", "transport_key"]

MAGIC = b"TETRARCH-AUTH/2"
PRE_AUTH_LIMIT = 4096
_NONCE = 32


class AuthError(TetrarchError, ConnectionError):
    """The peer failed the handshake (wrong secret, garbage, or out of order)."""


class Role(enum.Enum):
    LISTENER = "listener"
    DIALER = "dialer"


_INFO_MAX = 128


class PeerInfo(NamedTuple):
    """What a peer said of itself in the handshake."""

    #: Its process id (meaningful where ``host_key`` matches ours).
    pid: int
    #: :func:`tetrarch._runtime.plumbing._segments.host_key` of the peer ("" where it shares no memory).
    host_key: str
    #: The GPUs it opens CUDA IPC handles of (:func:`tetrarch._runtime.values._cuda.gpu_view`; "" for none).
    gpus: str = ""

    def encode(self) -> bytes:
        return f"{self.pid}/{self.host_key}/{self.gpus}".encode()

    @classmethod
    def decode(cls, data: bytes) -> PeerInfo:
        """Raises AuthError: ``data`` is not an encoded PeerInfo."""
        try:
            pid, key, gpus = data.decode("ascii").split("/", 2)
            return cls(int(pid), key, gpus)
        except (UnicodeDecodeError, ValueError):
            raise AuthError("peer sent a malformed self-description") from None


_NOBODY = PeerInfo(0, "")


def transport_key(secret: bytes) -> bytes:
    """The allocation's transport key (``Transport.use_key``): 32 bytes derived from ``secret`` under a
    label of its own, so it can travel where the secret must not (zmq's PLAIN handshake); the same in
    every process of the allocation, another for another secret."""
    return hmac.new(secret, b"tetrarch transport key v1", hashlib.sha256).digest()


def _mac(secret: bytes, label: bytes, a: bytes, b: bytes) -> bytes:
    return hmac.new(secret, label + a + b, hashlib.sha256).digest()


class Auth:
    """Handshake state of one connection (kept in ``Connection.context``)."""

    __slots__ = ("role", "secret", "local_address", "nonce", "peer_nonce", "done", "peer_address", "event", "error",
                 "info", "peer")

    def __init__(self, role: Role, secret: bytes, local_address: str, info: PeerInfo = _NOBODY) -> None:
        self.role = role
        #: What this side says of itself; ``peer``: what the peer said (once ``done``).
        self.info = info
        self.peer = _NOBODY
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
            addr, info = self.local_address.encode(), self.info.encode()
            mac = _mac(self.secret, b"dialer" + addr + b"\0" + info, self.peer_nonce, self.nonce)
            return [MAGIC, self.nonce, mac, addr, info]
        if self.role is Role.DIALER:
            if len(frames) != 2 or len(frames[1]) > _INFO_MAX:
                raise AuthError("peer failed to prove it holds the allocation's secret")
            info = bytes(frames[1])
            expected = _mac(self.secret, b"listener" + info, self.nonce, self.peer_nonce)
            if not hmac.compare_digest(bytes(frames[0]), expected):
                raise AuthError("peer failed to prove it holds the allocation's secret")
            self.peer = PeerInfo.decode(info)
            self.done = True
            return None
        # listener
        if len(frames) != 5 or bytes(frames[0]) != MAGIC or len(frames[1]) != _NONCE or len(frames[4]) > _INFO_MAX:
            raise AuthError("peer sent garbage instead of the tetrarch handshake")
        self.peer_nonce = bytes(frames[1])
        info = bytes(frames[4])
        expected = _mac(self.secret, b"dialer" + bytes(frames[3]) + b"\0" + info, self.nonce, self.peer_nonce)
        if not hmac.compare_digest(bytes(frames[2]), expected):
            raise AuthError("peer does not hold the allocation's secret")
        try:
            self.peer_address = bytes(frames[3]).decode()
        except UnicodeDecodeError:
            raise AuthError("peer sent an undecodable address") from None
        self.peer = PeerInfo.decode(info)
        self.done = True
        mine = self.info.encode()
        return [_mac(self.secret, b"listener" + mine, self.peer_nonce, self.nonce), mine]
