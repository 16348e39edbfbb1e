"""tetrarch quickstart: actors on 4 OS processes, the calling adverbs, and errors.

Run with ``make demo`` (or ``python examples/quickstart.py`` inside the venv).
"""

from __future__ import annotations

import asyncio
import os

from tetrarch import Actor, ActorError, context, current_rank, endpoint, this_host


class Counter(Actor):
    """A counter per proc; sync endpoints run on the actor's own thread."""

    def __init__(self, start: int) -> None:
        self.n = start

    @endpoint
    def incr(self, by: int = 1) -> None:
        self.n += by

    @endpoint
    def value(self) -> int:
        return self.n

    @endpoint
    def where(self) -> str:
        return f"rank {current_rank()} pid {os.getpid()} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}"


class Greeter(Actor):
    """An async actor: endpoints are coroutines on the actor's event loop."""

    @endpoint
    async def greet(self, name: str) -> str:
        await asyncio.sleep(0)  # async endpoints may await anything
        me = context().actor_instance.rank  # where this actor was spawned
        return f"hello {name} from gpus={me['gpus']}"


class Fragile(Actor):
    @endpoint
    def divide(self, a: float, b: float) -> float:
        return a / b


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 4})  # 4 real OS processes
    print(f"spawned {procs}")

    counters = procs.spawn("counters", Counter, 0)
    counters.incr.broadcast()  # fire and forget, to every rank
    counters.slice(gpus=slice(2, 4)).incr.broadcast(10)  # only ranks 2 and 3
    values = counters.value.call().get()  # ValueMesh({gpus: 4})
    print("values:", values)
    print("rank 2 alone:", counters.slice(gpus=2).value.call_one().get())
    for point, where in counters.where.call().get().items():
        print(f"  {point}: {where}")

    greeters = procs.spawn("greeters", Greeter)
    print(greeters.slice(gpus=1).greet.call_one("quickstart").get())
    print("sum over ranks via call():", sum(counters.value.call().get().values()))

    fragile = procs.spawn("fragile", Fragile)
    try:
        fragile.slice(gpus=0).divide.call_one(1, 0).get()
    except ActorError as err:
        print("the endpoint raised, and the caller got ActorError:")
        print("  exception:", repr(err.exception))
        print("  " + str(err).splitlines()[-1])
    print("the actor survived:", fragile.slice(gpus=0).divide.call_one(1, 4).get())

    procs.stop().get()
    print("stopped")


if __name__ == "__main__":
    main()
