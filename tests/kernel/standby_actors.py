"""Actors for the standby tests: one blocks until another actor of its proc lets it go."""

from __future__ import annotations

import asyncio
import os
import threading

from tetrarch import Actor, endpoint

_EVENTS: dict[str, threading.Event] = {}
_LOCK = threading.Lock()


def _event(name: str) -> threading.Event:
    with _LOCK:
        return _EVENTS.setdefault(name, threading.Event())


class Sleeper(Actor):
    """Blocks its thread (sync) or awaits (async) until :class:`Waker` sets the named event."""

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def wait_for(self, name: str, timeout: float) -> bool:
        return _event(name).wait(timeout)

    @endpoint
    async def wait_async(self, name: str, timeout: float) -> bool:
        return await asyncio.to_thread(_event(name).wait, timeout)


class Waker(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def wake(self, name: str) -> bool:
        _event(name).set()
        return True
