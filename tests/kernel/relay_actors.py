"""Actor classes for the relay tests (importable by the procs)."""

from __future__ import annotations

import os
import threading

from tetrarch import Actor, current_rank, endpoint


class Relayed(Actor):
    """Records what it was sent, in the order it ran it."""

    def __init__(self) -> None:
        self.log: list[int] = []
        self.release = threading.Event()

    @endpoint
    def rank(self) -> int:
        return current_rank().rank

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def add(self, seq: int) -> int:
        self.log.append(seq)
        return seq

    @endpoint
    def note(self, folder: str, seq: int) -> None:
        """Append ``seq`` to this rank's file in ``folder`` (seen after the proc is gone)."""
        with open(os.path.join(folder, f"rank{current_rank().rank}"), "a") as f:
            f.write(f"{seq}\n")

    @endpoint
    def take_log(self) -> list[int]:
        log, self.log = self.log, []
        return log

    @endpoint
    def empty(self) -> list[int]:
        """The same value from every rank: a relay sends it once."""
        return []

    @endpoint
    def fail_at(self, rank: int) -> int:
        me = current_rank().rank
        if me == rank:
            raise ValueError(f"rank {me} fails on purpose")
        return me

    @endpoint
    async def hang_at(self, pid: int) -> int:
        """Never answers in the proc ``pid`` (until it is killed); the others answer at once."""
        if os.getpid() == pid:
            import asyncio

            await asyncio.Event().wait()
        return current_rank().rank

    @endpoint
    def agent_link(self, wait_s: float) -> tuple[str | None, bool]:
        """``TETRARCH_RELAYED`` as this proc got it, and whether it is connected to its host agent once its
        dial ahead (if it made one) is over."""
        from tetrarch._runtime.process._root import get_root

        for thread in threading.enumerate():
            if thread.name == "tetrarch-dial-agent":
                # enumerate() also lists a thread whose start() has not returned yet, which join() refuses
                thread._started.wait(wait_s)  # type: ignore[attr-defined]
                thread.join(wait_s)
        root = get_root()
        agent = root.host_agent_address
        return os.environ.get("TETRARCH_RELAYED"), bool(agent) and root.router.connected(agent)
