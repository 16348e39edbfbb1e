"""The actor the RDMA suite puts in owner procs (importable by the procs: it lives in tetrarch)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from tetrarch import Actor, endpoint

__all__ = ["Holder", "digest", "pattern"]


def pattern(nbytes: int, seed: int) -> bytearray:
    """``nbytes`` of a pattern that differs per ``seed`` and per offset (cheap for 256 MiB)."""
    block = bytes((i * 7 + seed) % 251 for i in range(251 * 16))
    reps, rest = divmod(nbytes, len(block))
    return bytearray(block * reps + block[:rest])


def digest(data: Any) -> str:
    return hashlib.blake2b(memoryview(data).cast("B"), digest_size=16).hexdigest()


class Holder(Actor):
    """Owns buffers (by key) and reads other owners' buffers (as a third process)."""

    def __init__(self) -> None:
        self.memory: dict[str, bytearray] = {}

    @endpoint
    def make(self, key: str, nbytes: int, seed: int, backend: str) -> Any:
        from tetrarch.rdma import RDMABuffer

        self.memory[key] = pattern(nbytes, seed)
        return RDMABuffer(memoryview(self.memory[key]), backend=backend)

    @endpoint
    def digest(self, key: str) -> str:
        return digest(self.memory[key])

    @endpoint
    def read_from(self, buf: Any) -> str:
        dst = bytearray(buf.size())
        buf.read_into(dst, timeout=60).get()
        return digest(dst)

    @endpoint
    def forget(self, key: str) -> None:
        del self.memory[key]

    @endpoint
    def registrations(self) -> list[int]:
        """The ids of the RDMA buffers registered in this process now."""
        from tetrarch._rdma._runtime import get_runtime

        return get_runtime().registered()

    @endpoint
    def pid(self) -> int:
        return os.getpid()
