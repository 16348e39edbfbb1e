"""Actor classes for the port/channel tests (importable by the procs)."""

from __future__ import annotations

import asyncio
import threading

from tetrarch import Actor, Port, context, current_rank, endpoint


class Sender(Actor):
    @endpoint
    def send_many(self, port: Port[int], n: int) -> None:
        for i in range(n):
            port.send(i)

    @endpoint
    def send_rank(self, port: Port[int]) -> None:
        port.send(context().actor_instance.rank.rank)

    @endpoint
    def fail_through(self, port: Port[int], message: str) -> None:
        port.exception(KeyError(message))

    @endpoint
    def echo(self, value: object) -> object:
        return value

    @endpoint
    def rank(self) -> int:
        return context().actor_instance.rank.rank


class Ported(Actor):
    """Explicit response ports: the body answers through the port it is given."""

    def __init__(self) -> None:
        self.held: list[Port[str]] = []

    @endpoint(explicit_response_port=True)
    def add(self, port: Port[int], a: int, b: int) -> str:
        port.send(a + b)
        return "ignored"  # the return value of an explicit-port endpoint is dropped

    @endpoint(explicit_response_port=True)
    def rank_times(self, port: Port[int], k: int) -> None:
        port.send(current_rank().rank * k)

    @endpoint(explicit_response_port=True)
    async def async_add(self, port: Port[int], a: int, b: int) -> None:
        await asyncio.sleep(0)
        port.send(a + b)

    @endpoint(explicit_response_port=True)
    def later(self, port: Port[str]) -> None:
        self.held.append(port)  # answered by release(), from another thread

    @endpoint
    def release(self, value: str) -> int:
        held, self.held = self.held, []
        threads = [threading.Thread(target=p.send, args=(value,)) for p in held]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return len(held)

    @endpoint(explicit_response_port=True)
    def explode(self, port: Port[int]) -> None:
        raise ValueError("explicit port body raised")

    @endpoint(explicit_response_port=True)
    def refuse(self, port: Port[int], message: str) -> None:
        port.exception(ValueError(message))

    @endpoint
    def ok(self) -> str:
        return "alive"


class PortHolder(Actor):
    """Keeps a port it was given; can die while holding it."""

    @endpoint
    def hold(self, port) -> None:
        self.port = port
        port.send("held")

    @endpoint
    def exit(self) -> None:
        import os

        os._exit(1)
