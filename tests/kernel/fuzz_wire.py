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
library's wire (a raw DEALER socket and ZMTP 3.0 greeting); the nng helper opens a
pair0 connection as the transport's dialer does, after leaving a stalled stranger at the
listener.
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


# ------------------------------------------------------------------ nng (a pair0 socket per connection)

_SP_PAIR0 = 0x10  # nng's protocol number of pair0: what the listener's connections speak


def _nng_message(pair: Any, data: bytes) -> None:
    """``data`` as nng messages on an open connection, cut where the transport cuts (its chunk size).

    Never waits: once the listener dropped the connection nothing would take them.
    """
    import pynng

    from tetrarch_transport_nng.testing import CHUNK

    with contextlib.suppress(pynng.NNGException):
        for pos in range(0, max(1, len(data)), CHUNK):
            pair.send(data[pos : pos + CHUNK], block=False)


def _nng_connect(address: str) -> Attacker:
    """Open a connection the way the transport's dialer does, after a stranger that stalls.

    The listener accepts each connection itself and hands it to a fresh pair0 socket of its
    own (``socket://``). Before opening one, this leaves a raw stream that sends a pair0
    peer's SP header and then never completes a message (``raw`` data goes there too, read
    by nng as message sizes: huge ones among them). Then a pynng pair0 socket, handed a
    connected stream as the dialer does (``_conn.hand_over``), gets ``message`` (one nng
    message holding the core framing) and ``raw`` (the same bytes, as nng messages).
    """
    import threading

    import pynng

    from tetrarch.testing import scaled
    from tetrarch_transport_nng.testing import hand_over

    stalled = raw_connect(address)  # a peer that never completes a message
    stalled.sendall(b"\x00SP\x00" + struct.pack("!H", _SP_PAIR0) + b"\x00\x00")
    pair: Any = pynng.Pair0(send_timeout=5000)
    opened = threading.Event()
    pair.add_post_pipe_connect_cb(lambda _pipe: opened.set())
    hand_over(pair, raw_connect(address).detach())
    # nng adds the pipe once the SP headers were exchanged
    assert opened.wait(scaled(10)), f"the nng listener at {address} never opened a connection"

    def raw(data: bytes) -> None:
        _nng_message(pair, data)
        with contextlib.suppress(OSError):  # nng may have closed it (a size over its limit)
            stalled.sendall(data)

    return _NngAttacker(stalled, lambda frames: _nng_message(pair, _builtin_message(frames)), pair.close, raw)


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
