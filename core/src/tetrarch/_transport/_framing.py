"""The message framing shared by transports that carry tetrarch messages on a byte stream.

One message on the wire: ``!I`` frame count, ``!Q`` per frame length, then the frames
back to back. The builtin socket transport writes it to a stream; message-library
transports (nng) put it inside their own messages. Both use these helpers so the
limits (:data:`MAX_FRAMES`, the header counted toward ``max_message_size``) and the
receive buffers a large message lands in are the same everywhere, and so are the rules
of the optional receive sinks (:data:`tetrarch._transport._base.SinkResolver`):
:func:`sink_lead` says how much of a message a transport waits for before it asks, and
:func:`resolve_sinks` asks and checks the answer.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .._log import get_logger
from .._runtime.values._buffers import frame_buffer
from ._base import SinkResolver

__all__ = ["COUNT", "MAX_FRAMES", "OWN_MIN", "append_message", "consume", "header", "nbytes", "receive_buffers",
           "resolve_sinks", "sink_lead", "sizes_struct"]

_log = get_logger("transport")

#: The frame count that opens a message (``!I``): ``COUNT.pack(n)``, ``COUNT.unpack_from(data)``;
#: ``COUNT.size`` is 4. The ``!Q`` length of each frame follows (:func:`header` writes both).
COUNT = struct.Struct("!I")
#: The most frames one message may have; a receiver closes a connection that announces more.
MAX_FRAMES = 1 << 16
#: A frame of a large message at least this big gets a receive buffer of its own.
OWN_MIN = 1 << 16


def nbytes(b: bytes | bytearray | memoryview) -> int:
    """The size of one frame in bytes (a memoryview of any format counts its bytes, not its items). Never raises."""
    return b.nbytes if type(b) is memoryview else len(b)


def header(sizes: list[int]) -> bytes:
    """The header announcing frames of ``sizes`` bytes: the frame count (:data:`COUNT`), then each
    size as ``!Q``; ``4 + 8 * len(sizes)`` bytes, which count toward ``max_message_size``.

    Raises:
        struct.error: a size is negative or does not fit 64 bits, or there are 2**32 frames or more
            (a sender checks ``len(sizes) <= MAX_FRAMES`` first).
    """
    return struct.pack(f"!I{len(sizes)}Q", len(sizes), *sizes)


#: Compiled ``!I{n}Q`` (headers) and ``!{n}Q`` (the sizes in them) for the frame counts messages
#: usually have: ``struct.pack(f"...")`` formatted and looked up its format per message.
_HEADERS = [struct.Struct(f"!I{n}Q") for n in range(9)]
_SIZES = [struct.Struct(f"!{n}Q") for n in range(9)]


def sizes_struct(count: int) -> struct.Struct:
    """The ``!Q`` sizes of a header that announced ``count`` frames (``unpack_from`` them after the count)."""
    return _SIZES[count] if count < len(_SIZES) else struct.Struct(f"!{count}Q")


def append_message(bufs: list, frames: Sequence[bytes | bytearray | memoryview]) -> int:
    """Append one message to ``bufs`` for a vectored write: its :func:`header`, then its
    non-empty frames as they are (never copied); returns the bytes appended.

    Raises:
        struct.error: as :func:`header`.
    """
    count = len(frames)
    if count == 1:  # the hot cases, spelled out: a message is one or two frames, usually bytes
        f = frames[0]
        n = f.nbytes if type(f) is memoryview else len(f)
        bufs.append(_HEADERS[1].pack(1, n))
        if n:
            bufs.append(f)
        return 12 + n
    sizes = [f.nbytes if type(f) is memoryview else len(f) for f in frames]
    bufs.append(_HEADERS[count].pack(count, *sizes) if count < len(_HEADERS) else header(sizes))
    for f, n in zip(frames, sizes, strict=True):
        if n:
            bufs.append(f)
    return 4 + 8 * count + sum(sizes)


def receive_buffers(sizes: list[int], sinks: Sequence[memoryview | None] | None = None
                    ) -> tuple[list[memoryview], list[memoryview]]:
    """Buffers to read a large message into: ``(frames, targets)``.

    A frame with a sink (an entry of ``sinks``, as :func:`resolve_sinks` returns them) is
    received into it; any other frame of at least ``OWN_MIN`` bytes gets a
    :func:`frame_buffer` of its own (so the receiver can adopt it as ``bytes`` without a
    copy: ``as_bytes``); the smaller ones share one ``bytearray``. ``targets`` lists the
    non-empty frames in wire order: what is left to fill (with :func:`consume`). Deliver
    ``frames`` once ``targets`` is empty.

    Raises:
        ValueError: ``sinks`` has not one entry per frame.
        MemoryError: the buffers cannot be allocated (check the sizes against
            ``max_message_size`` before calling).
    """
    given = list(sinks) if sinks is not None else [None] * len(sizes)
    pool = memoryview(bytearray(sum(n for n, g in zip(sizes, given, strict=True) if n < OWN_MIN and g is None)))
    frames = []
    pos = 0
    for n, sink in zip(sizes, given, strict=True):
        if sink is not None:
            frames.append(sink)
        elif n >= OWN_MIN:
            frames.append(frame_buffer(n))
        else:
            frames.append(pool[pos : pos + n])
            pos += n
    return frames, [f for f in frames if f.nbytes]


def consume(targets: list[memoryview], n: int) -> None:
    """Drop the first ``n`` bytes (just filled) from ``targets``, in place: emptied targets go, a
    partly filled one is sliced past what was filled.

    Raises:
        IndexError: ``n`` exceeds the bytes ``targets`` still hold.
    """
    i = 0
    while i < len(targets) and n >= targets[i].nbytes:
        n -= targets[i].nbytes
        i += 1
    del targets[:i]
    if n:
        targets[0] = targets[0][n:]


def sink_lead(sizes: list[int]) -> int | None:
    """How many leading frames a sink resolver is shown: those before the first frame of at
    least ``OWN_MIN`` bytes, if they total less than ``OWN_MIN``; None when the message
    has no such frame or too long a lead (then nobody is asked)."""
    lead = 0
    for i, n in enumerate(sizes):
        if n >= OWN_MIN:
            return i if i else None
        lead += n
        if lead >= OWN_MIN:
            return None
    return None


def resolve_sinks(resolver: SinkResolver, data: bytes | bytearray | memoryview, sizes: list[int], lead: int
                  ) -> list[memoryview | None] | None:
    """Ask ``resolver`` where the frames after the first ``lead`` (a :func:`sink_lead`, read
    from ``data``, which starts at the first frame and holds at least the lead) go; one entry per frame (None: the
    transport's own buffer, the lead always), or None when it names no sink or breaks the
    rules of :data:`~tetrarch._transport._base.SinkResolver` (a writable, C-contiguous
    byte memoryview of exactly the frame's length)."""
    frames = []
    pos = 0
    for n in sizes[:lead]:
        frames.append(bytes(data[pos:pos + n]))
        pos += n
    try:
        answer = resolver(frames, sizes)
    except Exception:  # noqa: BLE001 - a faulty resolver costs a copy, never the connection
        _log.exception("a receive-sink resolver failed; receiving into the transport's own buffers")
        return None
    if answer is None:
        return None
    rest = sizes[lead:]
    if len(answer) != len(rest):
        _log.error("a receive-sink resolver named %d sinks for %d frames; ignored", len(answer), len(rest))
        return None
    out: list[memoryview | None] = [None] * lead
    for sink, n in zip(answer, rest, strict=True):
        if sink is not None and not (type(sink) is memoryview and not sink.readonly and sink.c_contiguous
                                     and sink.format == "B" and sink.nbytes == n):
            _log.error("a receive-sink resolver named an unusable sink for a %d-byte frame; ignored", n)
            return None
        out.append(sink)
    return out if any(s is not None for s in out) else None
