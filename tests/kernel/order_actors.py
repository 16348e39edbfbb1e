"""Actor classes for the ordering, future and concurrency tests (importable by the procs).

The ordering stress test shares :func:`plan` and :func:`drive` between its two kinds of
senders (actors on the mesh, threads of the client), so the test can recompute which
recorder should have seen which sequence number.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from tetrarch import Actor, Channel, Port, concurrent_endpoint, context, endpoint, send
from tetrarch.testing import scaled

# --------------------------------------------------------------------------- ordering

N_RECORDERS = 4
KINDS = ("broadcast", "call", "call_one", "slice_broadcast", "send", "port")
#: How long any one expected event may take (a hang catcher; scaled by TETRARCH_TEST_SLOWDOWN,
#: which the procs inherit with the rest of the client's environment).
WAIT_S = scaled(30.0)


def _me() -> int:
    """This actor's rank in the mesh it was spawned on (not in the slice a message went to)."""
    return context().actor_instance.rank.rank


def plan(sender: int, seq: int) -> tuple[str, tuple[int, ...]]:
    """How message ``seq`` of ``sender`` travels: the adverb and the recorder ranks it reaches.

    ``port`` messages reach no recorder: they go to the client's channel.
    """
    kind = KINDS[(seq + sender) % len(KINDS)]
    j = (seq // len(KINDS) + sender) % N_RECORDERS
    if kind in ("broadcast", "call"):
        return kind, tuple(range(N_RECORDERS))
    if kind == "call_one":
        return kind, (j,)
    if kind == "slice_broadcast":  # gpus=slice(j, j + 2): one or two recorders
        return kind, tuple(range(j, min(j + 2, N_RECORDERS)))
    if kind == "send":  # the whole mesh for even j, the single recorder j for odd j
        return kind, tuple(range(N_RECORDERS)) if j % 2 == 0 else (j,)
    return kind, ()


def expected_at(sender: int, n: int, rank: int) -> list[int]:
    """The sequence numbers of ``sender`` that recorder ``rank`` must see, in order."""
    return [s for s in range(n) if rank in plan(sender, s)[1]]


def drive(sender: int, n: int, recorders: Any, replies: Port, direct: Port) -> int:
    """Send messages ``0 .. n-1`` of ``sender`` as :func:`plan` says; return how many.

    Checks the results of the ``call``/``call_one`` messages, and ends with a ``flush``
    call to every recorder: once it answers, every earlier message of this sender has been
    handled (a sender's messages to one actor are handled in send order).
    """
    singles = [recorders.slice(gpus=r) for r in range(N_RECORDERS)]
    pairs = [recorders.slice(gpus=slice(r, r + 2)) for r in range(N_RECORDERS)]
    pending: list[tuple[int, Any, Any]] = []
    for s in range(n):
        kind, targets = plan(sender, s)
        j = targets[0] if targets else 0
        if kind == "broadcast":
            recorders.record.broadcast(sender, s)
        elif kind == "call":
            pending.append((s, targets, recorders.record.call(sender, s)))
        elif kind == "call_one":
            pending.append((s, targets, singles[j].record.call_one(sender, s)))
        elif kind == "slice_broadcast":
            pairs[j].record.broadcast(sender, s)
        elif kind == "send":
            target = recorders if len(targets) == N_RECORDERS else singles[j]
            send(target.record, (sender, s), port=replies)
        else:
            direct.send((sender, s))
    for s, targets, fut in pending:
        got = fut.get(timeout=WAIT_S)
        values = got.values() if len(targets) > 1 else [got]
        want = [(r, sender, s) for r in targets]
        if values != want:
            raise AssertionError(f"sender {sender} message {s}: replies {values}, expected {want}")
    recorders.flush.call().get(timeout=WAIT_S)
    return n


class Recorder(Actor):
    """Logs every ``(sender, seq)`` it receives, in arrival order."""

    def __init__(self) -> None:
        self.log: list[tuple[int, int]] = []

    @endpoint
    def record(self, sender: int, seq: int) -> tuple[int, int, int]:
        self.log.append((sender, seq))
        return (_me(), sender, seq)

    @endpoint
    def flush(self) -> int:
        return len(self.log)

    @endpoint
    def dump(self) -> list[tuple[int, int]]:
        return self.log


class OrderSender(Actor):
    """Runs :func:`drive` from inside an actor (sender id = 100 + its rank)."""

    @endpoint
    def run(self, n: int, recorders: Any, replies: Port, direct: Port) -> int:
        return drive(100 + _me(), n, recorders, replies, direct)

    @endpoint
    def interleave(self, n: int, recorders: Any, replies: Port) -> int:
        return interleave(7, n, recorders, replies)


def interleave(sender: int, n: int, recorders: Any, replies: Port) -> int:
    """One sender cycling through the full mesh and slices that all contain rank 2."""
    one = recorders.slice(gpus=2)
    pair = recorders.slice(gpus=slice(1, 3))
    futures = []
    for s in range(n):
        k = s % 6
        if k == 0:
            recorders.record.broadcast(sender, s)
        elif k == 1:
            one.record.broadcast(sender, s)
        elif k == 2:
            futures.append(one.record.call_one(sender, s))
        elif k == 3:
            pair.record.broadcast(sender, s)
        elif k == 4:
            futures.append(recorders.record.call(sender, s))
        else:
            send(one.record, (sender, s), port=replies)
    for fut in futures:
        fut.get(timeout=WAIT_S)
    recorders.flush.call().get(timeout=WAIT_S)
    return n


# --------------------------------------------------------------------------- futures


class Gate(Actor):
    """Answers ``hold`` calls only when ``release`` is called."""

    def __init__(self) -> None:
        self.held: list[Port[Any]] = []

    @endpoint(explicit_response_port=True)
    def hold(self, port: Port[Any]) -> None:
        self.held.append(port)

    @endpoint
    def release(self, value: Any) -> int:
        held, self.held = self.held, []
        for port in held:
            port.send(value)
        return len(held)

    @endpoint
    def boom(self, message: str) -> None:
        raise ValueError(message)

    @endpoint
    def value(self, x: Any) -> Any:
        return x


class Blocker(Actor):
    """Blocks on other actors' futures from inside its endpoints."""

    @endpoint
    def ask_sync(self, other: Any, rank: int, x: Any) -> Any:
        return other.slice(gpus=rank).value.call_one(x).get(timeout=WAIT_S)

    @endpoint
    def ask_all_sync(self, other: Any, x: Any) -> list[Any]:
        return other.value.call(x).get(timeout=WAIT_S).values()

    @endpoint
    def relay_boom(self, other: Any, rank: int, message: str) -> None:
        other.slice(gpus=rank).boom.call_one(message).get(timeout=WAIT_S)

    @endpoint
    async def ask_async(self, other: Any, rank: int, x: Any) -> Any:
        return await other.slice(gpus=rank).value.call_one(x)

    @endpoint
    async def get_in_async(self) -> list[str]:
        """Call ``Future.get`` on a pending future inside an async endpoint; the warnings seen."""
        return _warnings_of_pending_get()

    @endpoint
    def get_in_sync(self) -> list[str]:
        """The same from a sync endpoint (no event loop is visible there): no warning."""
        return _warnings_of_pending_get()


def _warnings_of_pending_get() -> list[str]:
    """The warnings ``Future.get`` emits on a future that stays pending (here and now)."""
    _port, receiver = Channel.open()
    fut = receiver.recv()  # nothing is ever sent: stays pending
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            fut.get(timeout=0.01)
        except TimeoutError:
            pass
    receiver.close()
    return [f"{w.category.__name__}: {w.message}" for w in seen]


# --------------------------------------------------------------------------- concurrency


class Overlap(Actor):
    """Counts how many of its async handlers run at the same time."""

    def __init__(self) -> None:
        self.active = 0
        self.max_active = 0
        self.handled = 0

    @endpoint
    async def work(self, seconds: float) -> int:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await asyncio.sleep(seconds)
            await asyncio.sleep(0)
        finally:
            self.active -= 1
        self.handled += 1
        return self.handled

    @endpoint
    async def stats(self) -> tuple[int, int]:
        return self.max_active, self.handled


class Waiter(Actor):
    """``block`` parks the actor's thread on a channel until the client unblocks it."""

    @endpoint
    def block(self, started: Port[Port[str]]) -> str:
        wake, receiver = Channel.open()
        started.send(wake)  # tell the client we are inside the blocking body
        return receiver.recv().get(timeout=WAIT_S)

    @endpoint
    def ping(self, x: Any) -> Any:
        return (_me(), x)


class Mixed(Actor):
    """Sync and async endpoints that log when each message starts and ends."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []

    @endpoint
    def sync_step(self, i: int) -> int:
        self.log.append(("start", i))
        self.log.append(("end", i))
        return i

    @endpoint
    async def async_step(self, i: int, seconds: float) -> int:
        self.log.append(("start", i))
        await asyncio.sleep(seconds)
        await asyncio.sleep(0)
        self.log.append(("end", i))
        return i

    @endpoint
    def dump(self) -> list[tuple[str, int]]:
        return self.log


class Concurrent(Actor):
    """``@concurrent_endpoint`` handlers overlap; a plain endpoint does not wait for them."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.log: list[str] = []

    @concurrent_endpoint
    async def wait_gate(self, tag: str) -> str:
        self.log.append(f"start {tag}")
        await self.gate.wait()
        self.log.append(f"end {tag}")
        return tag

    @concurrent_endpoint
    async def open_gate(self) -> str:
        self.log.append("open")
        self.gate.set()
        return "opened"

    @endpoint
    def plain(self) -> list[str]:
        return list(self.log)

    @concurrent_endpoint
    async def forever(self) -> None:
        await asyncio.Event().wait()
