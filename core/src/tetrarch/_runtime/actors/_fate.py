"""An actor's code that runs when its fate turns: ``__supervise__`` for a failure of a mesh it
owns, and ``__cleanup__`` when it stops (both on the actor's thread, for its
:class:`~._runner.ActorRunner`)."""

from __future__ import annotations

import asyncio
import threading
import traceback
from typing import Any, Protocol

from ..._config import CLEANUP_TIMEOUT
from ..._log import get_logger
from ..services._supervision import MeshFailure
from ..values._context import _current, _MessageInfo
from ._stopping import Once

__all__ = ["ActorRunner", "cleanup", "supervise"]


class ActorRunner(Protocol):
    """What this module needs of an actor's runner (:class:`~._runner.ActorRunner`)."""

    failed: str | None
    stopped: bool
    obj: Any
    display: str
    _loop: asyncio.AbstractEventLoop
    _info: _MessageInfo

    def fail(self, cause: str, causes: tuple[Any, ...] = ()) -> None: ...

_log = get_logger("actor")
_set_running_loop = asyncio.events._set_running_loop  # hide the loop inside sync actor code


def supervise(runner: ActorRunner, failure: MeshFailure) -> None:
    """Hand ``failure`` to the actor's ``__supervise__``; the actor fails if it has none, it
    raises, or it does not say the failure was handled (a falsy result)."""
    if runner.failed is not None or runner.stopped or runner.obj is None:
        return
    handler = getattr(runner.obj, "__supervise__", None)
    if handler is None:
        runner.fail(f"it has no __supervise__ to handle a failure of its mesh {failure.mesh_name!r} "
                    f"(rank {failure.rank})", failure._chain())
        return
    loop = runner._loop
    token = _current.set(runner._info)
    hidden = _set_running_loop(None)
    try:
        out = handler(failure)
    except BaseException as exc:  # noqa: BLE001
        _supervise_raised(runner, exc, failure)
        return
    finally:
        _set_running_loop(loop)
        _current.reset(token)
        del hidden
    if asyncio.iscoroutine(out):
        task = loop.create_task(out)
        task.add_done_callback(lambda t: _supervised_async(runner, t, failure))
    else:
        _supervised(runner, out, failure)


def _supervised_async(runner: ActorRunner, task: asyncio.Task, failure: MeshFailure) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        _supervise_raised(runner, exc, failure)
    else:
        _supervised(runner, task.result(), failure)


def _supervised(runner: ActorRunner, handled: Any, failure: MeshFailure) -> None:
    if not handled:
        runner.fail(f"its __supervise__ did not handle a failure of its mesh {failure.mesh_name!r} "
                    f"(rank {failure.rank})", failure._chain())


def _supervise_raised(runner: ActorRunner, exc: BaseException, failure: MeshFailure) -> None:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    _log.error("%s.__supervise__ raised while handling %s:\n%s", runner.display, failure, text)
    runner.fail(f"__supervise__ raised {type(exc).__name__}: {exc} (while handling a failure of mesh "
                f"{failure.mesh_name!r})", failure._chain())


async def cleanup(runner: ActorRunner, once: Once) -> None:
    """Run the actor's ``__cleanup__`` (if it has one) within ``TETRARCH_CLEANUP_TIMEOUT``; past it,
    say so and call ``once`` (the stop goes on without it). Never raises: a failing cleanup is logged."""
    fn = getattr(runner.obj, "__cleanup__", None) if runner.obj is not None else None
    if fn is None:
        return
    limit = CLEANUP_TIMEOUT()

    def overdue() -> None:
        _log.warning("%s.__cleanup__ did not finish within %g s (TETRARCH_CLEANUP_TIMEOUT); the stop goes on "
                     "without it", runner.display, limit)
        once()

    timer = threading.Timer(limit, overdue)
    timer.daemon = True
    timer.start()
    token = _current.set(runner._info)
    try:
        hidden = _set_running_loop(None)
        try:
            out = fn(None)
        finally:
            _set_running_loop(runner._loop)
            del hidden
        if asyncio.iscoroutine(out):
            await asyncio.wait_for(out, limit)
    except (asyncio.TimeoutError, TimeoutError):
        pass  # reported by the timer
    except BaseException as exc:  # noqa: BLE001 - a failing cleanup must not stop the stop
        _log.error("%s.__cleanup__ raised: %r", runner.display, exc)
    finally:
        timer.cancel()
        _current.reset(token)
