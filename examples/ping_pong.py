"""Ping-pong between two actor meshes that hold references to each other.

Two proc meshes of 2 procs each get one ``PingPong`` actor mesh apiece ("ping" and
"pong"). Each mesh is then handed the *other* mesh as an ordinary endpoint argument
(an ``ActorMesh`` pickles as a reference), and every actor keeps the slice of the
other mesh with its own rank as its partner: pairs ``ping[i] <-> pong[i]``.

In each round one side serves: ``serve(n)`` hits the ball to the partner with
``partner.hit.call_one(n)`` and waits for the return. The sides take turns serving, so
both meshes call each other. (An actor handles one message at a time: two partners
serving at the same moment would each wait for the other, which is why turns
alternate.)

Run with ``python examples/ping_pong.py`` (inside the venv).
"""

from __future__ import annotations

from typing import Any

from tetrarch import Actor, current_rank, endpoint, this_host


class PingPong(Actor):
    def __init__(self, side: str) -> None:
        self.side = side
        self.partner: Any = None
        self.hits = 0  # balls this actor hit: served or returned

    @endpoint
    def meet(self, other: Any) -> str:
        """Keep the actor of ``other`` that has this actor's rank as the partner."""
        rank = current_rank().rank
        self.partner = other.slice(gpus=rank)
        return f"{self.side}[{rank}]"

    @endpoint
    def serve(self, n: int) -> str:
        """Hit ball ``n`` to the partner and wait until it comes back."""
        self.hits += 1
        reply = self.partner.hit.call_one(n).get(timeout=30)
        return f"{self.side}[{current_rank().rank}] served ball {n}, {reply}"

    @endpoint
    def hit(self, n: int) -> str:
        """Return ball ``n``."""
        self.hits += 1
        return f"{self.side}[{current_rank().rank}] returned it"

    @endpoint
    def count(self) -> int:
        return self.hits


def main(rounds: int = 10) -> None:
    ping_procs = this_host().spawn_procs(per_host={"gpus": 2})
    pong_procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        ping = ping_procs.spawn("ping", PingPong, "ping")
        pong = pong_procs.spawn("pong", PingPong, "pong")
        ping.meet.call(pong).get(timeout=30)  # each mesh learns about the other
        pong.meet.call(ping).get(timeout=30)

        for n in range(rounds):
            server = ping if n % 2 == 0 else pong  # the sides take turns serving
            rally = server.serve.call(n).get(timeout=30)
            print(f"round {n}: " + "; ".join(rally.values()))

        # Every actor hit the ball once per round: served half of them, returned the rest.
        hits = ping.count.call().get(timeout=30).values() + pong.count.call().get(timeout=30).values()
        assert hits == [rounds] * 4, hits
        print(f"ping_pong: {len(ping)} pairs played {rounds} rounds")
    finally:
        ping_procs.stop().get(timeout=30)
        pong_procs.stop().get(timeout=30)


if __name__ == "__main__":
    main()
