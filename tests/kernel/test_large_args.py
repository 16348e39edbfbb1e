"""Large bytes-like values travel out of band: no copy into the pickle stream, none out of the receive buffer."""

from __future__ import annotations

import zlib

import pytest

from kernel_actors import Info, Payloads, peak_rss, peak_rss_reset
from tetrarch._runtime.values import _buffers, _serial
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


@pytest.mark.parametrize("kind", [bytes, bytearray])
@pytest.mark.transport_independent  # serialization only: no process
def test_large_bytes_like_arguments_are_sent_as_their_own_frame_without_a_copy(kind: type) -> None:
    big = kind(b"\x07" * (8 << 20))
    frames = _serial.dumps(((big, [big]), {"again": {"k": big}}))
    stream, *buffers = frames
    assert len(stream) < 1024, "the payload must not be copied into the pickle stream"
    assert len(buffers) == 3 and all(memoryview(b).obj is big for b in buffers), "frames are views of the object"
    args, kwargs = _serial.loads([memoryview(f) for f in frames])
    assert type(args[0]) is kind and args[0] == big and args[1][0] == big and kwargs["again"]["k"] == big


@pytest.mark.transport_independent  # serialization only: no process
def test_small_bytes_stay_in_band() -> None:
    frames = _serial.dumps(((b"abc", bytearray(b"def")), {}))
    assert len(frames) == 1 and _serial.loads(frames) == ((b"abc", bytearray(b"def")), {})


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_large_bytes_round_trip_through_an_actor(procs, kind: type) -> None:
    info = procs.slice(gpus=0).spawn("big_bytes", Info)
    big = kind(bytes(range(256)) * (64 << 12))  # 64 MiB
    echoed = info.echo.call_one(big).get(timeout=scaled(30))
    assert type(echoed) is kind and len(echoed) == len(big) and zlib.crc32(echoed) == zlib.crc32(big)


@pytest.mark.transport_independent  # serialization only: no process
def test_a_large_memoryview_travels_out_of_band_and_keeps_its_format_and_shape() -> None:
    import array

    data = memoryview(array.array("d", range(1 << 15))).cast("B").cast("d", (1 << 10, 1 << 5))
    stream, *buffers = _serial.dumps(((data,), {}))
    assert len(stream) < 1024 and len(buffers) == 1, "the view's bytes must not be copied into the pickle stream"
    (got,), _ = _serial.loads([stream, *buffers])
    assert type(got) is memoryview and got.format == "d" and got.shape == (1 << 10, 1 << 5)
    assert got.tolist() == data.tolist()


@pytest.mark.transport_independent  # serialization only: no process
def test_a_received_frame_becomes_the_bytes_argument_without_a_copy() -> None:
    """What the transport does with a large frame: read it into a frame_buffer, which unpickles as that very bytes."""
    big = bytes(range(256)) * (1 << 12)
    stream, sent = _serial.dumps(big)
    frame = _buffers.frame_buffer(len(big))
    frame[:] = sent  # the transport's recv_into
    got = _serial.loads([stream, frame])
    assert type(got) is bytes and got == big
    assert got is _buffers.as_bytes(frame), "the bytes object is the receive buffer itself"


@pytest.mark.transport_independent  # serialization only: no process
def test_a_received_frame_still_gives_writable_arrays() -> None:
    np = pytest.importorskip("numpy")
    arr = np.arange(1 << 14, dtype=np.float64)
    stream, sent = _serial.dumps(arr)
    frame = _buffers.frame_buffer(arr.nbytes)
    frame[:] = sent
    got = _serial.loads([stream, frame])
    got[0] = 42.0  # writable, like an array received before
    assert got[1:].tolist() == arr[1:].tolist() and got[0] == 42.0


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_large_bytes_like_arguments_arrive_intact_and_typed(procs, kind: type) -> None:
    sink = procs.slice(gpus=1).spawn(f"digest_{kind.__name__}", Payloads)
    data = bytes(range(256)) * (32 << 12)  # 32 MiB
    arg = kind(bytearray(data)) if kind is memoryview else kind(data)
    name, size, crc = sink.digest.call_one(arg).get(timeout=scaled(30))
    assert (name, size, crc) == (kind.__name__, len(data), zlib.crc32(data))


_PAYLOAD = 128 << 20


def test_a_large_bytes_argument_is_held_once_by_the_receiving_actor(procs) -> None:
    """The issue's 1 GiB bytes argument cost the actor twice its size; now the receive buffer is the argument."""
    sink = procs.slice(gpus=2).spawn("peak_arg", Payloads)
    data = bytes(range(256)) * (_PAYLOAD // 256)
    before = sink.reset_peak.call_one().get(timeout=scaled(30))
    if before is None:
        pytest.skip("this kernel does not let a process reset its peak RSS (/proc/self/clear_refs)")
    assert sink.digest.call_one(data).get(timeout=scaled(60)) == ("bytes", len(data), zlib.crc32(data))
    grew = sink.peak.call_one().get(timeout=scaled(30)) - before
    assert grew < 1.5 * _PAYLOAD, f"receiving {_PAYLOAD >> 20} MiB raised the actor's peak RSS by {grew >> 20} MiB"


def test_a_large_bytes_result_is_held_once_by_the_caller(procs) -> None:
    sink = procs.slice(gpus=3).spawn("peak_result", Payloads)
    sink.make.call_one(1 << 16).get(timeout=scaled(30))  # warm the path up
    before = peak_rss_reset()
    if before is None:
        pytest.skip("this kernel does not let a process reset its peak RSS (/proc/self/clear_refs)")
    got = sink.make.call_one(_PAYLOAD).get(timeout=scaled(60))
    grew = peak_rss() - before
    assert type(got) is bytes and got == bytes(range(256)) * (_PAYLOAD // 256)
    assert grew < 1.5 * _PAYLOAD, f"receiving {_PAYLOAD >> 20} MiB raised the client's peak RSS by {grew >> 20} MiB"
