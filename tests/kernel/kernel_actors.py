"""Actor classes the kernel tests spawn (an importable module, as users' code would be)."""

from __future__ import annotations

import asyncio
import os
import threading

from tetrarch import Actor, context, current_rank, current_size, endpoint


class Counter(Actor):
    def __init__(self, start: int = 0) -> None:
        self.n = start

    @endpoint
    def incr(self, by: int = 1) -> None:
        self.n += by

    @endpoint
    def value(self) -> int:
        return self.n

    def helper(self) -> int:  # not an endpoint
        return 0


class Info(Actor):
    @endpoint
    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def rank(self) -> tuple[dict[str, int], dict[str, int], int]:
        return dict(current_rank()), current_size(), context().actor_instance.rank.rank

    @endpoint
    def echo(self, value: object) -> object:
        return value

    @endpoint
    def thread_name(self) -> str:
        return threading.current_thread().name


class AsyncGreeter(Actor):
    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    @endpoint
    async def greet(self, name: str) -> str:
        await asyncio.sleep(0.001)
        return f"{self.greeting}, {name}"

    @endpoint
    async def loop_is_visible(self) -> bool:
        return asyncio.get_running_loop() is not None


class Failing(Actor):
    @endpoint
    def boom(self, message: str) -> None:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise ValueError(message) from inner

    @endpoint
    async def aboom(self) -> None:
        raise RuntimeError("async boom")

    @endpoint
    def unpicklable_result(self, kind: str) -> object:
        if kind == "lock":
            return threading.Lock()
        deep: list = []
        for _ in range(100_000):  # nesting deeper than pickle's recursion limit
            deep = [deep]
        return deep

    @endpoint
    def ok(self) -> str:
        return "still alive"


class InitFails(Actor):
    def __init__(self) -> None:
        raise RuntimeError("cannot construct")

    @endpoint
    def ok(self) -> str:
        return "never"


class NotAnActor:
    pass


class Sleeper(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def sleep(self, seconds: float) -> float:
        import time

        time.sleep(seconds)
        return seconds


class MeshUser(Actor):
    """Receives another actor mesh as an argument and calls it from its own proc."""

    @endpoint
    def bump_and_read(self, counters: object) -> list[int]:
        counters.incr.broadcast(5)  # type: ignore[attr-defined]
        return counters.value.call().get().values()  # type: ignore[attr-defined]


def peak_rss_reset() -> int | None:
    """Reset this process's peak RSS (``VmHWM``) to its current RSS and return that (None if the kernel refuses)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return _proc_status("VmRSS")


def peak_rss() -> int:
    """This process's peak RSS in bytes since the last :func:`peak_rss_reset`."""
    return _proc_status("VmHWM")


def _proc_status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


class Payloads(Actor):
    """Receives and returns large payloads, and says how much memory that took."""

    @endpoint
    def reset_peak(self) -> int | None:
        return peak_rss_reset()

    @endpoint
    def peak(self) -> int:
        return peak_rss()

    @endpoint
    def digest(self, data: object) -> tuple[str, int, int]:
        """``(type name, size in bytes, crc32)`` of a bytes-like argument."""
        import zlib

        return type(data).__name__, memoryview(data).nbytes, zlib.crc32(data)  # type: ignore[arg-type]

    @endpoint
    def make(self, size: int) -> bytes:
        return bytes(range(256)) * (size // 256)


class Looper(Actor):
    """Has an endpoint named ``stop``, as Monarch's examples do (grpo_actor.py's Scorer)."""

    def __init__(self) -> None:
        self.running = True

    @endpoint
    def stop(self) -> str:
        self.running = False
        return "loop stopped"

    @endpoint
    def is_running(self) -> bool:
        return self.running
