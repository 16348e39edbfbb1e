"""Attack clients for the fuzz test: one per transport, each speaking that transport's wire, never the handshake.

A :class:`Wire` says how to reach a listening proc of one transport as an
unauthenticated peer would:

* ``connect(address)`` opens an :class:`Attacker` to the proc's address, with
  ``message(frames)`` (one well-formed message of the transport, sent the way its
  library sends one) and ``raw(data)`` (bytes as they are on the wire, after whatever
  opening the wire needs to reach its framing);
* ``announce(lengths, count)`` gives the wire's bytes that announce ``count`` frames of
  ``lengths`` (the payload would follow): huge lengths, counts that disagree with the
  frames sent, headers cut short are built from it.

Adding a transport is one function returning its :class:`Wire`, registered in
:data:`WIRES` under the transport's name. The zmq helper speaks that
library's wire (a raw DEALER socket and ZMTP 3.0 greeting); the nng helper claims a
connection through the transport's rep0 handshake, as its dialer does, after leaving
garbage, unclaimed tokens and a never-completed dialer at that handshake socket.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from raw_socket import raw_connect

__all__ = ["WIRES", "Attacker", "Wire"]


class Attacker:
    """An unauthenticated client of one listening proc (close it when done)."""

    def __init__(self, stream: socket.socket | None, send_message: Callable[[Sequence[bytes]], None],
                 close: Callable[[], None] = lambda: None, opening: bytes = b"") -> None:
        self._stream = stream
        self._send_message = send_message
        self._close = close
        self._opening = opening
        self._opened = False

    def message(self, frames: Sequence[bytes]) -> None:
        """Send one well-formed message (the listener may already have closed us: ignored)."""
        with contextlib.suppress(OSError):
            self._send_message(frames)

    def raw(self, data: bytes) -> None:
        """Send ``data`` on the wire, after the wire's opening (ignored once the listener closed us)."""
        if self._stream is None:
            raise RuntimeError("this wire has no raw stream")
        with contextlib.suppress(OSError):
            if not self._opened:
                self._opened = True
                self._stream.sendall(self._opening)
            self._stream.sendall(data)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._close()


@dataclass(frozen=True)
class Wire:
    """How to attack a listening proc of one transport."""

    connect: Callable[[str], Attacker]
    announce: Callable[[Sequence[int], int], bytes]


def _strip(address: str) -> str:
    """``zmq+tcp://h:p`` -> ``tcp://h:p`` (a qualified scheme's backend removed)."""
    scheme, sep, rest = address.partition("://")
    return f"{scheme.rpartition('+')[2]}{sep}{rest}"


# ------------------------------------------------------------------ builtin (ipc, tcp)

def _builtin_announce(lengths: Sequence[int], count: int) -> bytes:
    """A 4-byte frame count, then an 8-byte length per frame (network order)."""
    return struct.pack("!I", count) + b"".join(struct.pack("!Q", n) for n in lengths)


def _builtin_message(frames: Sequence[bytes]) -> bytes:
    return _builtin_announce([len(f) for f in frames], len(frames)) + b"".join(frames)


def _builtin_connect(address: str) -> Attacker:
    stream = raw_connect(address)
    return Attacker(stream, lambda frames: stream.sendall(_builtin_message(frames)))


def builtin_wire() -> Wire:
    return Wire(_builtin_connect, _builtin_announce)


# ------------------------------------------------------------------ zmq (ZMTP 3.0)

_ZMTP_GREETING = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + bytes(31)
_ZMTP_MORE, _ZMTP_LONG, _ZMTP_COMMAND = 0x01, 0x02, 0x04


def _zmtp_ready(socket_type: bytes) -> bytes:
    body = b"\x05READY" + b"\x0bSocket-Type" + struct.pack("!I", len(socket_type)) + socket_type
    return bytes([_ZMTP_COMMAND, len(body)]) + body


def _zmq_announce(lengths: Sequence[int], count: int) -> bytes:
    """Each frame's header (flags, 8-byte size): MORE on all but the ``count``-th."""
    return b"".join(struct.pack("!BQ", _ZMTP_LONG | (_ZMTP_MORE if i + 1 < count else 0), n)
                    for i, n in enumerate(lengths))


def _zmq_connect(address: str) -> Attacker:
    import zmq

    plain = _strip(address)
    dealer: Any = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(plain)
    return Attacker(raw_connect(plain), lambda frames: dealer.send_multipart(list(frames), copy=False),
                    dealer.close, opening=_ZMTP_GREETING + _zmtp_ready(b"DEALER"))


def zmq_wire() -> Wire:
    return Wire(_zmq_connect, _zmq_announce)


# ------------------------------------------------------------------ nng (rep0 handshake, then a pair0 socket)

_SP_REQ0 = 0x30  # nng's protocol number of req0: what a dialer of the listener's rep0 socket announces


def _nng_message(pair: Any, data: bytes) -> None:
    """``data`` as nng messages on a claimed socket, cut where the transport cuts (its chunk size).

    Never waits: once the listener dropped the connection nothing would take them.
    """
    import pynng

    from tetrarch_transport_nng._conn import CHUNK

    with contextlib.suppress(pynng.NNGException):
        for pos in range(0, max(1, len(data)), CHUNK):
            pair.send(data[pos : pos + CHUNK], block=False)


def _nng_connect(address: str) -> Attacker:
    """Claim a connection the way the transport's dialer does, after abusing the handshake socket.

    The listener is a rep0 socket: a request (magic + token) gets the address of a fresh
    pair0 socket, which opens once the token comes back on it. Before claiming one, this
    leaves garbage at the handshake socket: a request with the wrong magic, a request whose
    token is never claimed (its socket waits and expires), and a raw stream that announces
    req0 and then never completes a message (``raw`` data goes there too, read by nng as
    SP sizes: huge ones among them). Then the claimed pair0 socket gets ``message`` (one
    nng message holding the core framing) and ``raw`` (the same bytes, as nng messages).
    """
    import secrets

    import pynng

    from tetrarch.plugins import parse_qualified
    from tetrarch_transport_nng._nng import _MAGIC, _TOKEN, _url

    url = _url(parse_qualified(address, "nng"))
    ms = 5000
    handshake = raw_connect(address)  # a dialer that never completes a request
    handshake.sendall(b"\x00SP\x00" + struct.pack("!H", _SP_REQ0) + b"\x00\x00")
    owned: list[Any] = []

    def request(body: bytes, *, answered: bool = True) -> str:
        req = pynng.Req0(send_timeout=ms, recv_timeout=ms, recv_max_size=4096)
        owned.append(req)
        req.dial(url, block=True)
        req.send(body)
        return req.recv().decode() if answered else ""

    request(b"garbage, not the magic", answered=False)  # the listener closes that pipe
    request(_MAGIC + secrets.token_bytes(_TOKEN))  # a socket handed out and never claimed
    token = secrets.token_bytes(_TOKEN)
    where = request(_MAGIC + token)
    pair: Any = pynng.Pair0(send_timeout=ms)
    owned.append(pair)
    pair.dial(where, block=True)
    pair.send(token)

    def raw(data: bytes) -> None:
        _nng_message(pair, data)
        with contextlib.suppress(OSError):  # nng may have closed it (a size over its limit)
            handshake.sendall(data)

    def close() -> None:
        for sock in owned:
            sock.close()

    return _NngAttacker(handshake, lambda frames: _nng_message(pair, _builtin_message(frames)), close, raw)


class _NngAttacker(Attacker):
    """``raw`` goes to the claimed socket as nng messages and to the handshake socket's stream."""

    def __init__(self, stream: socket.socket, send_message: Callable[[Sequence[bytes]], None],
                 close: Callable[[], None], raw: Callable[[bytes], None]) -> None:
        super().__init__(stream, send_message, close)
        self._raw = raw

    def raw(self, data: bytes) -> None:
        self._raw(data)


def nng_wire() -> Wire:
    return Wire(_nng_connect, _builtin_announce)


#: The attack helpers by transport name.
WIRES: dict[str, Callable[[], Wire]] = {
    "ipc": builtin_wire,
    "tcp": builtin_wire,
    "zmq": zmq_wire,
    "nng": nng_wire,
}
