"""Actor classes for the gate-pattern and cancellation tests (importable by the procs)."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from tetrarch import Actor, Port, concurrent_endpoint, endpoint


class AsyncGate(Actor):
    """Monarch's gate: concurrent handlers wait for an event that a plain endpoint sets."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.unblock = asyncio.Event()
        self.log: list[str] = []

    @concurrent_endpoint
    async def wait(self, tag: str = "done") -> str:
        self.log.append(f"start {tag}")
        self.ready.set()
        await self.unblock.wait()
        self.log.append(f"end {tag}")
        return tag

    @endpoint
    async def release_when_ready(self) -> str:
        await self.ready.wait()
        self.log.append("release")
        self.unblock.set()
        return "released"

    @endpoint
    def release_sync(self) -> str:
        self.log.append("release")
        self.unblock.set()
        return "released"

    @endpoint
    async def plain(self, tag: str, delay: float = 0.0) -> str:
        self.log.append(f"plain {tag} start")
        await asyncio.sleep(delay)
        self.log.append(f"plain {tag} end")
        return tag

    @endpoint
    def dump(self) -> list[str]:
        return list(self.log)


class ExplicitPortGate(Actor):
    def __init__(self) -> None:
        self.unblock = asyncio.Event()

    @concurrent_endpoint(explicit_response_port=True)
    async def wait(self, port: Port[str]) -> None:
        port.send("started")
        await self.unblock.wait()

    @endpoint
    async def ping(self) -> str:
        return "pong"

    @endpoint
    async def release(self) -> None:
        self.unblock.set()


class SelfCaller(Actor):
    """Waits for calls to its own endpoints: the waits that could never end raise."""

    @endpoint
    async def target(self) -> str:
        return "target"

    @concurrent_endpoint
    async def concurrent_target(self) -> str:
        return "concurrent target"

    @endpoint
    async def await_self(self, me: Any) -> str:
        try:
            return await me.target.call_one()
        except Exception as exc:  # noqa: BLE001 - the test reads the error
            return f"{type(exc).__name__}: {exc}"

    @endpoint
    def get_self_sync(self, me: Any) -> str:
        try:
            return me.concurrent_target.call_one().get()
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"

    @concurrent_endpoint
    async def await_self_concurrently(self, me: Any) -> str:
        return await me.target.call_one()


class Sleeper(Actor):
    """Long endpoints a caller gives up on."""

    def __init__(self) -> None:
        self.cancelled = 0

    @endpoint
    async def nap(self, started: Port[str], seconds: float) -> str:
        started.send("napping")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return "woke"

    @endpoint
    def block(self, started: Port[Any], seconds: float) -> str:
        """Block the actor's thread until the port it sends back gets a message (or ``seconds``)."""
        from tetrarch import Channel

        release, released = Channel.open()
        started.send(release)
        return released.recv().get(timeout=seconds)

    @endpoint
    async def hold(self, started: Port[Any]) -> str:
        """Hold the actor (a plain async endpoint) until the port it sends back gets a message."""
        from tetrarch import Channel

        release, released = Channel.open()
        started.send(release)
        return await released.recv()

    @endpoint
    def ping(self) -> tuple[str, int]:
        return ("pong", self.cancelled)

    @endpoint
    async def cancelling(self) -> int:
        """Cancellations pending on the task that runs this call (0 unless one leaked into it)."""
        await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()


_CALL_TAG: contextvars.ContextVar[str] = contextvars.ContextVar("call_tag", default="unset")


class Tagger(Actor):
    """A plain async endpoint that sets a context variable: calls back to back must not see each other's."""

    @endpoint
    async def tag(self, tag: str) -> tuple[str, str]:
        before = _CALL_TAG.get()
        _CALL_TAG.set(tag)
        await asyncio.sleep(0)
        return before, _CALL_TAG.get()

    @endpoint
    async def time_out(self, seconds: float) -> str:
        """Wait past an ``asyncio.timeout`` of ``seconds``: each call of a burst times out on its own."""
        try:
            async with asyncio.timeout(seconds):
                await asyncio.sleep(3600)
        except TimeoutError:
            task = asyncio.current_task()
            assert task is not None
            return f"timed out, {task.cancelling()} pending"
        return "slept an hour"
