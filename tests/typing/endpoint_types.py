"""Static typing of the user-facing API, checked by mypy in ``make lint`` (never run).

``assert_type`` fails the lint when an endpoint's adverbs stop being typed from the
actor method's signature, or slicing stops returning the mesh's own type.
"""

from __future__ import annotations

import asyncio
from typing import assert_type

from tetrarch import Actor, ActorMesh, Future, ProcMesh, ValueMesh, endpoint


class Counter(Actor):
    def __init__(self, start: int) -> None:
        self.n = start

    @endpoint
    def value(self) -> int:
        return self.n

    @endpoint
    async def add(self, by: int, label: str = "") -> float:
        return self.n + by


def check(procs: ProcMesh) -> None:
    counters = procs.spawn("c", Counter, 0)
    assert_type(counters.value.call_one(), Future[int])
    assert_type(counters.value.call_one().get(), int)
    counters.value()  # type: ignore[operator]  # an endpoint is called through an adverb, never directly
    assert_type(counters.add.call(1, label="x").get(), ValueMesh[float])
    assert_type(counters.add.choose(2), Future[float])
    counters.add.call_one("not an int")  # type: ignore[arg-type]  # the signature is enforced
    assert_type(procs.slice(gpus=0), ProcMesh)
    assert_type(procs.flatten("all").rename(all="ranks"), ProcMesh)


def monarch_style(procs: ProcMesh, counters: ActorMesh[Counter]) -> None:
    """Monarch programs annotate meshes with their actor class and run ``logging_option`` as a coroutine."""
    assert_type(asyncio.run(procs.logging_option(stream_to_client=True)), None)
    assert_type(procs.logging_option().get(), None)
    assert_type(procs._labels, list[str])
