"""``RDMAAction``: many transfers submitted together, grouped by backend, run concurrently."""

from __future__ import annotations

from concurrent.futures import Future as CFuture
from typing import Any

from .._errors import ArgumentError, NotSupportedError
from .._runtime.values._future import Future
from ._buffer import DEFAULT_TIMEOUT, RDMABuffer, _check_timeout, as_future, choose_backend, fit, start_transfer
from ._memory import Memory, as_memory

__all__ = ["RDMAAction"]


class RDMAAction:
    """A batch of reads and writes; :meth:`submit` runs them all at once.

    ``read_remote(dst, src_buffer)`` and ``write_remote(dst_buffer, src)`` only record
    (checking sizes now); a batch may be submitted again.
    """

    def __init__(self) -> None:
        self._ops: list[tuple[RDMABuffer, bool, Memory]] = []

    def read_remote(self, dst: Any, src: RDMABuffer) -> RDMAAction:
        """Add: copy the remote buffer ``src`` into local ``dst``.

        Raises:
            ValueError: ``dst`` too small, or overlapping the destination of another read of
                this batch; TypeError, RDMAError: as ``RDMABuffer.read_into``.
        """
        src._check_live("read_remote")
        memory = fit(as_memory(dst, "RDMAAction.read_remote(dst)", writable=True), src.size(), "read_remote", "dst")
        region = memory.region
        for _buf, write, other in self._ops:
            o = other.region
            if not write and o.address < region.address + region.nbytes and region.address < o.address + o.nbytes:
                raise ArgumentError("RDMAAction.read_remote: dst overlaps the destination of an earlier read in this "
                                    "batch; two reads would write the same local bytes")
        self._ops.append((src, False, memory))
        return self

    def write_remote(self, dst: RDMABuffer, src: Any) -> RDMAAction:
        """Add: copy local ``src`` into the remote buffer ``dst``.

        Raises:
            ValueError: ``src`` larger than ``dst``; TypeError, RDMAError: as ``RDMABuffer.write_from``.
        """
        dst._check_live("write_remote")
        memory = fit(as_memory(src, "RDMAAction.write_remote(src)", writable=False), dst.size(), "write_remote",
                     "src")
        self._ops.append((dst, True, memory))
        return self

    def fetch_add(self, *args: Any, **kwargs: Any) -> RDMAAction:
        """Not supported (as in Monarch).

        Raises:
            NotImplementedError: always.
        """
        raise NotSupportedError("RDMAAction.fetch_add is not supported")

    def compare_and_swap(self, *args: Any, **kwargs: Any) -> RDMAAction:
        """Not supported (as in Monarch).

        Raises:
            NotImplementedError: always.
        """
        raise NotSupportedError("RDMAAction.compare_and_swap is not supported")

    def submit(self, *, timeout: float = DEFAULT_TIMEOUT) -> Future[None]:
        """Start every transfer (grouped by backend, all in flight at once); the Future is done
        when all are, and fails with the first failure.

        Raises:
            ValueError: ``timeout`` is not positive.
        """
        seconds = _check_timeout(timeout)
        groups: dict[str, list[tuple[RDMABuffer, bool, Memory]]] = {}
        started: list[CFuture[None]] = []
        for op in self._ops:
            try:
                name = choose_backend(op[0]._desc)
            except Exception as exc:  # noqa: BLE001 - the batch's future carries it
                failed: CFuture[None] = CFuture()
                failed.set_exception(exc)
                started.append(failed)
                continue
            groups.setdefault(name, []).append(op)
        for name, ops in groups.items():
            started += [start_transfer(buf._desc, write, memory, seconds, name) for buf, write, memory in ops]
        return as_future(started)
