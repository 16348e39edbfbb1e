"""What crossed this process's connections and RDMA backends, counted while metrics are on.

The router counts each message it sends to, or receives from, an authenticated peer
(:func:`count`), by peer address; the RDMA layer counts each finished
transfer by backend, direction and outcome (:func:`rdma_done`). The call sites test
:data:`ON` first, so with metrics off (the default) a message pays one global lookup.

Counting starts with metrics (``TETRARCH_METRICS=1``, :func:`tetrarch._telemetry.on_counting`); once
the exporter exists (:func:`tetrarch._telemetry.on_meter`), these
observable instruments read the counters at export time:

* ``tetrarch.connection.messages`` (counter, ``{message}``) [peer, direction]
* ``tetrarch.connection.bytes`` (counter, ``By``) [peer, direction]
* ``tetrarch.rdma.transfers`` (counter, ``{transfer}``) [backend, op, outcome]
* ``tetrarch.rdma.bytes`` (counter, ``By``) [backend, op]: bytes of the transfers that succeeded

``direction`` is ``out`` or ``in``; ``peer`` is the other process's tetrarch address. A
message's bytes are its frames' as handed to (or received from) the transport, out-of-band
buffers included, before a same-host payload is moved through shared memory.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future as CFuture
from typing import Any

from . import on_counting, on_meter

__all__ = ["IN", "ON", "OUT", "count", "counts", "nbytes", "rdma_counts", "rdma_done"]

#: Whether counting is on (metrics started in this process); call sites test it first.
ON = False
_lock = threading.Lock()
#: Each thread counts in a table of its own (no lock on the message path), read together at export:
#: peer address -> [messages out, bytes out, messages in, bytes in].
_local = threading.local()
_tables: list[dict[str, list[int]]] = []
#: (backend, op, outcome) -> [transfers, bytes]
_rdma: dict[tuple[str, str, str], list[int]] = {}


def nbytes(frames: Sequence[Any]) -> int:
    """The bytes of a message's ``frames`` (bytes, memoryviews or any buffer)."""
    n = 0
    for f in frames:
        t = type(f)
        n += f.nbytes if t is memoryview else len(f) if t is bytes else memoryview(f).nbytes
    return n


def _row(peer: str) -> list[int]:
    table: dict[str, list[int]] | None = getattr(_local, "table", None)
    if table is None:
        table = _local.table = {}
        with _lock:
            _tables.append(table)
    return table.setdefault(peer, [0, 0, 0, 0])


#: :func:`count`'s ``column`` for a message sent, and for one received.
OUT, IN = 0, 2


def count(peer: str, frames: Sequence[Any], column: int) -> None:
    """One message of ``frames`` went to ``peer`` (``column`` :data:`OUT`) or came from it (:data:`IN`),
    counted in the calling thread's table."""
    try:
        row = _local.table[peer]
    except (AttributeError, KeyError):
        row = _row(peer)
    size = 0
    for f in frames:  # nbytes(), inlined: a third of this function's cost was the call
        t = type(f)
        size += len(f) if t is bytes else f.nbytes if t is memoryview else memoryview(f).nbytes
    row[column] += 1
    row[column + 1] += size


def rdma_done(backend: str, write: bool, nbytes: int, fut: CFuture[None]) -> None:
    """A transfer of ``nbytes`` through ``backend`` finished as ``fut`` says (its done callback)."""
    ok = not fut.cancelled() and fut.exception() is None
    key = (backend, "write" if write else "read", "ok" if ok else "error")
    with _lock:
        row = _rdma.setdefault(key, [0, 0])
        row[0] += 1
        row[1] += nbytes if ok else 0


def counts() -> dict[str, tuple[int, int, int, int]]:
    """Per peer: ``(messages out, bytes out, messages in, bytes in)`` so far."""
    total: dict[str, list[int]] = {}
    with _lock:
        tables = list(_tables)
    for table in tables:
        for peer, row in list(table.items()):
            acc = total.setdefault(peer, [0, 0, 0, 0])
            for i in range(4):
                acc[i] += row[i]
    return {peer: (row[0], row[1], row[2], row[3]) for peer, row in total.items()}


def rdma_counts() -> dict[tuple[str, str, str], tuple[int, int]]:
    """Per ``(backend, op, outcome)``: ``(transfers, bytes)`` so far."""
    with _lock:
        return {key: (row[0], row[1]) for key, row in _rdma.items()}


def _count() -> None:
    global ON
    ON = True


def _instruments(meter: Any) -> None:
    from opentelemetry.metrics import CallbackOptions, Observation

    def conn(column: int) -> Any:
        def observe(_options: CallbackOptions) -> list[Observation]:
            out = []
            for peer, row in counts().items():
                out.append(Observation(row[column], {"peer": peer, "direction": "out"}))
                out.append(Observation(row[column + 2], {"peer": peer, "direction": "in"}))
            return out
        return observe

    def rdma(column: int, successes_only: bool) -> Any:
        def observe(_options: CallbackOptions) -> list[Observation]:
            return [Observation(row[column], {"backend": b, "op": op} if successes_only else
                                {"backend": b, "op": op, "outcome": outcome})
                    for (b, op, outcome), row in rdma_counts().items() if not successes_only or outcome == "ok"]
        return observe

    meter.create_observable_counter("tetrarch.connection.messages", [conn(0)], unit="{message}",
                                    description="messages sent to (out) and received from (in) a peer process")
    meter.create_observable_counter("tetrarch.connection.bytes", [conn(1)], unit="By",
                                    description="bytes of the messages sent to and received from a peer process")
    meter.create_observable_counter("tetrarch.rdma.transfers", [rdma(0, False)], unit="{transfer}",
                                    description="RDMA transfers finished, by backend, op and outcome")
    meter.create_observable_counter("tetrarch.rdma.bytes", [rdma(1, True)], unit="By",
                                    description="bytes moved by the RDMA transfers that succeeded")


on_counting(_count)
on_meter(_instruments)
