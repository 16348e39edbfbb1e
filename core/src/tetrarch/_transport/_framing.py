"""The message framing shared by transports that carry tetrarch messages on a byte stream.

One message on the wire: ``!I`` frame count, ``!Q`` per frame length, then the frames
back to back. The builtin socket transport writes it to a stream; message-library
transports (nng) put it inside their own messages. Both use these helpers so the
limits (:data:`MAX_FRAMES`, the header counted toward ``max_message_size``) and the
receive buffers a large message lands in are the same everywhere.
"""

from __future__ import annotations

import struct

from .._runtime._buffers import frame_buffer

__all__ = ["COUNT", "MAX_FRAMES", "OWN_MIN", "consume", "header", "receive_buffers"]

COUNT = struct.Struct("!I")
#: The most frames one message may have.
MAX_FRAMES = 1 << 16
#: A frame of a large message at least this big gets a receive buffer of its own.
OWN_MIN = 1 << 16


def header(sizes: list[int]) -> bytes:
    """The header announcing frames of ``sizes`` bytes."""
    return struct.pack(f"!I{len(sizes)}Q", len(sizes), *sizes)


def receive_buffers(sizes: list[int]) -> tuple[list[memoryview], list[memoryview]]:
    """Buffers to read a large message into: ``(frames, targets)``.

    A frame of at least ``OWN_MIN`` bytes gets a :func:`frame_buffer` of its own (so the
    receiver can adopt it as ``bytes`` without a copy); the smaller ones share one
    ``bytearray``. ``targets`` lists the non-empty frames in wire order: what is left to fill.
    """
    pool = memoryview(bytearray(sum(n for n in sizes if n < OWN_MIN)))
    frames = []
    pos = 0
    for n in sizes:
        if n >= OWN_MIN:
            frames.append(frame_buffer(n))
        else:
            frames.append(pool[pos : pos + n])
            pos += n
    return frames, [f for f in frames if f.nbytes]


def consume(targets: list[memoryview], n: int) -> None:
    """Drop the first ``n`` bytes (just filled) from ``targets``."""
    i = 0
    while i < len(targets) and n >= targets[i].nbytes:
        n -= targets[i].nbytes
        i += 1
    del targets[:i]
    if n:
        targets[0] = targets[0][n:]
