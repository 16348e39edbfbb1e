"""The job server's control protocol: length-prefixed JSON frames on a Unix domain socket.

Nothing read from the socket is unpickled: every message is a JSON object with a
``type`` and the fields of one NamedTuple below (one per message, fields documented where
declared). A frame is a 4-byte big-endian length, then that many bytes of UTF-8 JSON.

A connection starts with :class:`Hello` (at most :data:`MAX_HELLO` bytes) carrying the
job's token; the server compares it in constant time before it reads anything else and
answers with :class:`Reply`. Then one request: :class:`RunRequest` (answered by
:class:`Output` lines as the ranks print them, then :class:`RunDone`),
:class:`StatusRequest` or :class:`KillRequest` (answered by :class:`Reply`).
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any, NamedTuple

from .._errors import TetrarchError

__all__ = ["MAX_FRAME", "MAX_HELLO", "MAX_REQUEST", "VERSION", "Hello", "KillRequest", "Output", "ProtocolError",
           "Reply", "RunDone", "RunRequest", "StatusRequest", "decode", "recv", "send"]

VERSION = 1
MAX_HELLO = 512  #: bytes of the first frame, at most
MAX_REQUEST = 1 << 20  #: bytes of a request, at most
MAX_FRAME = 8 << 20  #: bytes of any frame from the server, at most (a longer output line is cut)
_LEN = struct.Struct(">I")


class ProtocolError(TetrarchError, ConnectionError):
    """The peer closed the connection, sent a frame over the limit, or a malformed message."""


class Hello(NamedTuple):
    """The client's first frame."""

    token: str  #: the job's secret, from its state file
    version: int = VERSION  #: the protocol version the client speaks


class RunRequest(NamedTuple):
    """Run the program on every rank."""

    program: list[str] | None  #: script args (``["train.py", ...]``, ``["-m", "mod", ...]``); None: the job's own
    no_python: bool = False  #: ``program`` is an executable (``--no-python``)


class StatusRequest(NamedTuple):
    """Ask for the job's :class:`Reply` ``data``: pid, world size, proc ids, runs so far."""


class KillRequest(NamedTuple):
    """Stop the job: its procs, host agents and the server; the state file is removed."""


class Output(NamedTuple):
    """One line a rank wrote, as the server printed it (prefixed with the rank)."""

    fd: int  #: 1 (stdout) or 2 (stderr)
    line: str  #: the line, with its newline


class RunDone(NamedTuple):
    """The end of a run; no frame follows."""

    outcome: dict[str, Any]  #: a ``RunOutcome`` as a dict


class Reply(NamedTuple):
    """The answer to a hello, a status or a kill request."""

    ok: bool
    error: str = ""  #: why not, when not ok
    data: dict[str, Any] = {}  # noqa: RUF012 - NamedTuple defaults are shared and never mutated


_TYPES: dict[str, type[Any]] = {"hello": Hello, "run": RunRequest, "status": StatusRequest, "kill": KillRequest,
                                "output": Output, "done": RunDone, "reply": Reply}
_NAMES = {cls: name for name, cls in _TYPES.items()}


def encode(msg: Any) -> bytes:
    """``msg`` (one of the messages above) as a frame."""
    body = json.dumps({"type": _NAMES[type(msg)], **msg._asdict()}).encode()
    return _LEN.pack(len(body)) + body


def decode(body: bytes) -> Any:
    """The message in the JSON ``body``.

    Raises:
        ProtocolError: not a JSON object of a known type with its fields.
    """
    try:
        data = json.loads(body)
        cls = _TYPES[data.pop("type")]
        return cls(**data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"malformed control message ({type(exc).__name__}: {exc})") from None


def send(sock: socket.socket, msg: Any) -> None:
    """Send one message.

    Raises:
        OSError: the connection failed (e.g. ``BrokenPipeError``, or a send timeout).
    """
    sock.sendall(encode(msg))


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 16))
        if not chunk:
            raise ProtocolError("the peer closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket, limit: int, expect: type[Any] | tuple[type[Any], ...] | None = None) -> Any:
    """Read one message of at most ``limit`` bytes (of ``expect`` type(s), when given).

    Raises:
        ProtocolError: closed, over the limit, malformed, or not of the expected type.
        OSError: the connection failed (``TimeoutError`` for a socket timeout).
    """
    (n,) = _LEN.unpack(_exactly(sock, _LEN.size))
    if n > limit:
        raise ProtocolError(f"a control frame of {n} bytes exceeds the limit of {limit}")
    msg = decode(_exactly(sock, n))
    if expect is not None and not isinstance(msg, expect):
        raise ProtocolError(f"unexpected control message {type(msg).__name__}")
    return msg
