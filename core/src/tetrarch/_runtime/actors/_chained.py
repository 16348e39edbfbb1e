"""Plain async calls back to back, run in one task: the coroutine driver that gives each its own context.

A plain async handler's task runs the plain async calls queued right behind it too (see
``ActorRunner._call_async``), so a burst of calls costs no task and no loop turn per call:
a task per call made a pipelined async call cost twice the actor's CPU of a sync one. Each
call still runs in a context of its own, as it did in a task of its own: :func:`in_context`
steps its coroutine inside a given :class:`contextvars.Context` while the task awaits it.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["in_context"]

T = TypeVar("T")


@types.coroutine
def in_context(ctx: contextvars.Context, coro: Coroutine[Any, Any, T]) -> Generator[Any, Any, T]:
    """Await ``coro`` with each of its steps run in ``ctx`` (its ``ContextVar`` writes stay there).

    What ``coro`` yields (the futures it waits for) goes to the awaiting task unchanged, and
    what the task sends or throws back (a result, ``CancelledError``) goes to ``coro``; so
    ``asyncio.current_task()``, cancellation and timeouts work in it as in the task itself.
    """
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = ctx.run(coro.send, value) if error is None else ctx.run(coro.throw, error)
        except StopIteration as stop:
            return stop.value
        value = error = None
        try:
            value = yield step
        except GeneratorExit:  # the task is being closed: close the call too
            coro.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - thrown into the task: the call gets it
            error = exc
