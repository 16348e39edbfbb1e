"""Actors of the shared-memory payload tests (test_shm_payloads.py); procs import this file."""

from __future__ import annotations

import os
import signal
import zlib
from typing import Any

import numpy as np

from tetrarch import Actor, endpoint
from tetrarch._runtime.plumbing._shm_wire import payload_origin


def describe(value: Any) -> tuple[str, str, tuple[int, ...], int, bool]:
    """``(origin, dtype, shape, crc32 of the bytes, writable)`` of a received array or tensor."""
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return payload_origin(value), value.dtype.str, value.shape, zlib.crc32(data.tobytes()), value.flags.writeable
    import torch

    flat = value.contiguous().view(torch.uint8).reshape(-1) if value.numel() else value.view(torch.uint8)
    return payload_origin(value), str(value.dtype), tuple(value.shape), zlib.crc32(flat.numpy().tobytes()), True


class Keeper(Actor):
    """Receives payloads, keeps or drops them, returns them and dies on request."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def describe(self, value: Any) -> tuple[str, str, tuple[int, ...], int, bool]:
        return describe(value)

    @endpoint
    def describe_all(self, values: dict[str, Any]) -> dict[str, tuple]:
        return {k: describe(v) for k, v in values.items()}

    @endpoint
    def write_and_sum(self, value: Any) -> float:
        """Writes into the received array (it is the receiver's own), then sums it."""
        value[...] = 2
        return float(value.sum())

    @endpoint
    def keep(self, value: Any) -> int:
        self.kept.append(value)
        return len(self.kept)

    @endpoint
    def kept_crcs(self) -> list[int]:
        return [describe(v)[3] for v in self.kept]

    @endpoint
    def drop(self) -> None:
        self.kept.clear()

    @endpoint
    def make(self, kind: str, n: int, fill: int) -> Any:
        if kind == "numpy":
            return np.full(n, fill, dtype=np.int32)
        import torch

        return torch.full((n,), fill, dtype=torch.int32)

    @endpoint
    def echo(self, value: Any) -> Any:
        return value

    @endpoint
    def pass_on(self, value: Any, other: Any, keep: bool) -> tuple[str, int]:
        """Passes what it received on to ``other`` (its ``keep``), keeping it too or not; returns the
        received payload's origin and this process's pool size (a copy would have taken a segment)."""
        from tetrarch._runtime.plumbing import _segments

        origin = payload_origin(value)
        other.keep.call_one(value).get(timeout=60)
        if keep:
            self.kept.append(value)
        return origin, _segments.pool().nbytes

    @endpoint
    def pool_bytes(self) -> int:
        from tetrarch._runtime.plumbing import _segments

        return _segments.pool().nbytes

    @endpoint
    def fill_kept(self, fill: int) -> None:
        """Writes ``fill`` into the last payload it keeps."""
        self.kept[-1][...] = fill

    @endpoint
    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    @endpoint
    def send_unreadable(self, port: Any, pid: int) -> None:
        """Sends ``port`` a message whose shared-memory payload names a segment that is gone."""
        from tetrarch._runtime.plumbing import _shm_wire
        from tetrarch._runtime.router._router import current_router
        from tetrarch._runtime.values import _serial, _wire

        router = current_router()
        frames = [_wire.port_header(port._port, 0, _wire.OK), *_serial.dumps(np.ones(1 << 18, np.float32))]
        frames = _shm_wire.outgoing(frames, pid)
        head = bytearray(frames[0])
        head[len(_shm_wire.MARK) + 2 + 11:len(_shm_wire.MARK) + 2 + 19] = (1 << 62).to_bytes(8, "little")  # inode
        frames[0] = bytes(head)
        router.send(port._address, frames)


class Sharer(Actor):
    """Writes into what it received and says where its memory lives."""

    @endpoint
    def fill(self, value: Any, fill: float) -> str:
        value.fill_(fill)
        return payload_origin(value)


class Dier(Actor):
    """Says it is about to return a large result, which the test kills it around."""

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def big(self, started: Any, n: int) -> Any:
        value = np.full(n, 7, dtype=np.int64)
        started.send(os.getpid())
        return value
