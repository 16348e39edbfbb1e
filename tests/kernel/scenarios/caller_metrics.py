"""A known workload for caller-side metrics (TETRARCH_METRICS=1): prints DONE at the end.

``echo`` is called CALLS times on a mesh of two (request: a REQUEST-byte argument; reply:
REPLY bytes per rank), ``fail`` once (actor_error), ``park`` once waited for with a timeout that
expires (timeout), and ``exit`` once, which ends its proc (supervision).
"""

import asyncio
import os

from tetrarch import Actor, ActorError, SupervisionError, concurrent_endpoint, endpoint, this_host

CALLS, REQUEST, REPLY = 5, 100_000, 50_000


class Worker(Actor):
    def __init__(self) -> None:
        self.released = asyncio.Event()

    @endpoint
    def echo(self, data: bytes) -> bytes:
        return b"y" * REPLY

    @endpoint
    def fail(self) -> None:
        raise ValueError("on purpose")

    @concurrent_endpoint
    async def park(self) -> int:
        await self.released.wait()
        return 1

    @endpoint
    def release(self) -> None:
        self.released.set()

    @endpoint
    def exit(self) -> None:
        os._exit(3)


procs = this_host().spawn_procs(per_host={"gpus": 2}, name="workers")
workers = procs.spawn("workers", Worker)
for _ in range(CALLS):
    assert len(workers.echo.call(b"x" * REQUEST).get().item(gpus=1)) == REPLY
try:
    workers.slice(gpus=0).fail.call_one().get()
except ActorError:
    pass
parked = workers.slice(gpus=0).park.call_one()
try:
    parked.get(timeout=0.2)
except TimeoutError:
    pass
workers.slice(gpus=0).release.call_one().get()
assert parked.get() == 1
doomed = this_host().spawn_procs(per_host={"gpus": 1}, name="doomed")
try:
    doomed.spawn("doomed", Worker).exit.call_one().get()
except SupervisionError:
    pass
procs.stop().get()
print("DONE", flush=True)
