"""The actor the RDMA suite puts in owner procs (importable by the procs: it lives in tetrarch), and
the *outsider*: ``python -m tetrarch.testing._rdma_actors TIMEOUT`` is a tetrarch client of its own
(a fresh allocation secret) that reads a pickled ``RDMABuffer`` (hex on stdin) and writes to it,
and prints what happened as JSON (see :func:`outsider`)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import time
from typing import Any

from tetrarch import Actor, endpoint

__all__ = ["SENTINEL", "VIEW_IDIOMS", "Holder", "digest", "outsider", "pattern"]

#: The byte an outsider's destination is filled with: any other byte there came from the owner.
SENTINEL = 0xEE


def pattern(nbytes: int, seed: int) -> bytearray:
    """``nbytes`` of a pattern that differs per ``seed`` and per offset (cheap for 256 MiB)."""
    block = bytes((i * 7 + seed) % 251 for i in range(251 * 16))
    reps, rest = divmod(nbytes, len(block))
    return bytearray(block * reps + block[:rest])


def digest(data: Any) -> str:
    if type(data).__module__.startswith("torch"):  # a CPU tensor (small: for the view tests)
        import torch

        data = bytearray(data.view(torch.uint8).tolist())
    return hashlib.blake2b(memoryview(data).cast("B"), digest_size=16).hexdigest()


#: How :meth:`Holder.make_view` builds a buffer over float memory it keeps: a byte view made
#: and dropped at once, as Monarch's programs do. Each maps (float32 memory) -> the byte view.
VIEW_IDIOMS: dict[str, str] = {
    "torch": "t.view(torch.uint8).flatten()",
    "torch-chain": "t.view(-1).view(torch.uint8)",
    "numpy": "a.reshape(-1).view(np.uint8)",
    "numpy-of-torch": "t.view(torch.uint8).numpy()",
}


def _float_memory(idiom: str, raw: bytearray) -> Any:
    """float32 memory holding the bytes ``raw``: a numpy array for ``numpy``, else a torch tensor."""
    if idiom == "numpy":
        import numpy as np

        return np.frombuffer(raw, dtype=np.float32).copy()
    import torch

    t = torch.empty(len(raw) // 4, dtype=torch.float32)
    t.view(torch.uint8).copy_(torch.frombuffer(raw, dtype=torch.uint8))
    return t


def _byte_view(idiom: str, memory: Any) -> Any:
    """The byte view :data:`VIEW_IDIOMS` names, of ``memory``."""
    if idiom == "numpy":
        import numpy as np

        return memory.reshape(-1).view(np.uint8)
    import torch

    if idiom == "torch":
        return memory.view(torch.uint8).flatten()
    if idiom == "torch-chain":
        return memory.view(-1).view(torch.uint8)
    if idiom == "numpy-of-torch":
        return memory.view(torch.uint8).numpy()
    raise ValueError(f"unknown idiom {idiom!r}; one of {sorted(VIEW_IDIOMS)}")


class Holder(Actor):
    """Owns buffers (by key) and reads other owners' buffers (as a third process)."""

    def __init__(self) -> None:
        self.memory: dict[str, Any] = {}

    @endpoint
    def make(self, key: str, nbytes: int, seed: int, backend: str | None) -> Any:
        from tetrarch.rdma import RDMABuffer

        self.memory[key] = pattern(nbytes, seed)
        return RDMABuffer(memoryview(self.memory[key]), backend=backend)

    @endpoint
    def make_view(self, key: str, nbytes: int, seed: int, backend: str | None, idiom: str) -> Any:
        """A buffer over a byte view of float32 memory that this actor keeps (``self.memory[key]``)
        while the view is dropped at once (:data:`VIEW_IDIOMS`); ``nbytes`` is a multiple of 4."""
        from tetrarch.rdma import RDMABuffer

        self.memory[key] = _float_memory(idiom, pattern(nbytes, seed))
        return RDMABuffer(_byte_view(idiom, self.memory[key]), backend=backend)

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
        from tetrarch._rdma._service import rdma_service

        return rdma_service().registered()

    @endpoint
    def pid(self) -> int:
        return os.getpid()


def outsider(handle: bytes, timeout: float) -> list[dict[str, Any]]:
    """In a process of another allocation: read the buffer pickled in ``handle`` into a
    destination full of :data:`SENTINEL`, then write :data:`SENTINEL` bytes to it. One dict per
    attempt: ``op``, ``error`` (``"Type: message"`` or None), ``seconds``, ``untouched`` (the
    destination holds only :data:`SENTINEL`). Never raises for a failed transfer."""
    buf = pickle.loads(handle)
    out = []
    for op in ("read", "read", "write"):
        local = bytearray([SENTINEL]) * buf.size()
        start = time.monotonic()
        error = None
        try:
            fut = buf.read_into(local, timeout=timeout) if op == "read" else buf.write_from(local, timeout=timeout)
            fut.get(timeout=timeout + 30)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            error = f"{type(exc).__name__}: {exc}"
        out.append({"op": op, "error": error, "seconds": time.monotonic() - start,
                    "untouched": local.count(SENTINEL) == len(local)})
    return out


if __name__ == "__main__":
    print(json.dumps(outsider(bytes.fromhex(sys.stdin.read().strip()), float(sys.argv[1]))), flush=True)
    from tetrarch import shutdown_context

    shutdown_context().get(timeout=30)
