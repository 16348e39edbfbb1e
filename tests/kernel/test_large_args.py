"""Large ``bytes`` and ``bytearray`` travel out of band: no copy into the pickle stream."""

from __future__ import annotations

import zlib

import pytest

from kernel_actors import Info
from tetrarch._runtime import _serial
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_large_bytes_like_arguments_are_sent_as_their_own_frame_without_a_copy(kind: type) -> None:
    big = kind(b"\x07" * (8 << 20))
    frames = _serial.dumps(((big, [big]), {"again": {"k": big}}))
    stream, *buffers = frames
    assert len(stream) < 1024, "the payload must not be copied into the pickle stream"
    assert len(buffers) == 3 and all(memoryview(b).obj is big for b in buffers), "frames are views of the object"
    args, kwargs = _serial.loads([memoryview(f) for f in frames])
    assert type(args[0]) is kind and args[0] == big and args[1][0] == big and kwargs["again"]["k"] == big


def test_small_bytes_stay_in_band() -> None:
    frames = _serial.dumps(((b"abc", bytearray(b"def")), {}))
    assert len(frames) == 1 and _serial.loads(frames) == ((b"abc", bytearray(b"def")), {})


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_large_bytes_round_trip_through_an_actor(procs, kind: type) -> None:
    info = procs.slice(gpus=0).spawn("big_bytes", Info)
    big = kind(bytes(range(256)) * (64 << 12))  # 64 MiB
    echoed = info.echo.call_one(big).get(timeout=scaled(30))
    assert type(echoed) is kind and len(echoed) == len(big) and zlib.crc32(echoed) == zlib.crc32(big)
