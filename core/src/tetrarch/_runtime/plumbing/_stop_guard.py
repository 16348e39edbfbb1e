"""Bounds on stopping inside a proc: actors whose stop cannot begin, and the interpreter's exit.

Python cannot interrupt a thread: an actor whose thread is blocked in ``__init__`` or in a
sync endpoint (``threading.Event().wait()``) never reaches the stop queued behind it. So
a stop is bounded from outside the actor:

* :func:`bound_stop` gives one actor's stop ``TETRARCH_STOP_TIMEOUT`` seconds to begin.
  One that has not (its stop is still queued behind what its thread runs) is reported
  with what it runs and where (:func:`describe_stuck`), and the caller decides: the proc
  agent makes the proc exit, since nothing else would end that thread.
* :func:`guard_exit` bounds the interpreter's finalisation once a proc returns from its
  main: non-daemon threads left running and atexit handlers that block are reported
  (what it waited for, every thread's stack on stderr, which reaches the owner) and the
  process ends with :data:`EXIT_STUCK_FINALIZING`. ``faulthandler``'s own watchdog (a C
  thread that needs no GIL) ends a process stuck later in finalisation, after the Python
  threads stopped running.

Both, and :func:`running_endpoint` (what a failing actor was running, for its failure
report), read what an actor runs from its runner's frames on the thread's stack
(``_RUNNER_FRAMES``, ``_CALL_FRAMES``: the names of ``ActorRunner`` methods). Renaming
those methods breaks ``tests/kernel/test_supervision.py`` and ``test_stop_bounds.py``,
which check the endpoint, ``__init__`` and ``__supervise__`` they name.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["EXIT_STUCK_FINALIZING", "StopTarget", "bound_stop", "class_name", "describe_stuck", "guard_exit",
           "running_endpoint"]

#: The exit code of a proc that had to cut its own finalisation short (past its stop's bound).
EXIT_STUCK_FINALIZING = 3
#: Seconds past the bound at which faulthandler's C watchdog ends a process whose Python
#: threads no longer run (late finalisation), should the Python watchdog not have.
_BACKSTOP_S = 1.0
#: The innermost frames of a stuck actor's stack that its report shows.
_STACK_FRAMES = 8

#: What the actor runner's methods (and _fate's functions) run for it, while they are on its thread's stack.
_RUNNER_FRAMES = {"_init": "__init__", "_supervised": "__supervise__", "_supervised_async": "__supervise__",
                  "_supervise_raised": "__supervise__", "_cleanup": "__cleanup__"}
#: Runner methods that run an endpoint (its name is their ``method`` local, or ``hdr.method``).
_CALL_FRAMES = {"_handle_call", "_call_async", "_run_async"}


class StopTarget(Protocol):
    """What :func:`bound_stop` needs of an actor being stopped (an ``ActorRunner``)."""

    display: str
    cls: type
    _thread: threading.Thread
    _mailbox: Any  # deque of (callable, args)

    def _stop_now(self, on_done: Callable[[], None]) -> Any:
        """Where its stop begins (on its own thread)."""
        ...


def _stop_queued(actor: StopTarget) -> bool:
    """Whether ``actor``'s stop is still waiting in its mailbox (its thread never got to it)."""
    for _ in range(3):  # the I/O thread may append meanwhile: copy again
        try:
            return any(fn == actor._stop_now for fn, _args in list(actor._mailbox))
        except RuntimeError:
            continue
    return True


def _runner_frame(actor: object, frame: Any) -> tuple[str, Any]:
    """``(what, frame)``: the innermost frame of ``actor``'s runner on the stack at ``frame`` and
    what it runs for the actor (an endpoint's name, ``__init__``, ...); ``("", None)`` if none."""
    f = frame
    while f is not None:
        name = f.f_code.co_name
        if (name in _RUNNER_FRAMES or name in _CALL_FRAMES) and (
                f.f_locals.get("self") is actor or f.f_locals.get("runner") is actor):  # a method, or _fate's
            if name in _RUNNER_FRAMES:
                return _RUNNER_FRAMES[name], f
            method = f.f_locals.get("method") or getattr(f.f_locals.get("hdr"), "method", "")
            return str(method), f
        f = f.f_back
    return "", None


def running_endpoint(actor: object) -> str:
    """What ``actor`` runs on the calling thread: an endpoint's name, ``__init__``,
    ``__supervise__`` or ``__cleanup__``; '' when none of its code is on this thread's stack."""
    return _runner_frame(actor, sys._getframe(1))[0]


def describe_stuck(actor: StopTarget) -> tuple[str, str]:
    """``(what, stack)``: what the thread of ``actor`` runs (e.g. ``"its __init__"``,
    ``"its endpoint 'step'"``) and its innermost frames, formatted; ``stack`` is ''
    when the thread waits in its event loop (an async handler that does not return)."""
    frame = sys._current_frames().get(actor._thread.ident or -1)
    running, start = _runner_frame(actor, frame)
    if start is None:
        running = getattr(actor, "_running_method", "")
        what = f"its async endpoint {running!r}" if running else "an async handler that does not return"
        return what, ""
    what = f"its {running}" if running.startswith("__") else f"its endpoint {running!r}"
    stack = traceback.format_stack(frame)
    depth = 0
    f = frame
    while f is not None and f is not start:
        depth += 1
        f = f.f_back
    shown = stack[-depth:] if depth else stack[-1:]
    return what, "".join(shown[-_STACK_FRAMES:]).rstrip()


def class_name(cls: type) -> str:
    """``module.QualName`` of ``cls``: how a failure report names an actor's class (as Monarch's)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def bound_stop(actor: StopTarget, finished: threading.Event, limit: float,
               on_stuck: Callable[[str, str], None], bound: str = "TETRARCH_STOP_TIMEOUT") -> None:
    """Call ``on_stuck(reason, where)`` if ``actor``'s stop has not begun ``limit`` s from now.

    ``where`` is the stuck thread's innermost frames, led by a line naming the actor ('' when
    it waits in its event loop, see :func:`describe_stuck`); ``bound`` names where ``limit``
    comes from, for ``reason``. ``finished`` is set when the stop completed. A stop that
    began (its thread runs it) is bounded by its own timeouts (children, ``__cleanup__``)
    and is left alone.
    """

    def watch() -> None:
        if finished.wait(limit) or not _stop_queued(actor):
            return
        what, stack = describe_stuck(actor)
        who = f"actor {actor.display} ({class_name(actor.cls)})"
        reason = (f"{who} could not be stopped: {limit:g} s after its stop ({bound}) its thread still runs "
                  f"{what}, which Python cannot interrupt")
        on_stuck(reason, f"{who}: its thread is at:\n{stack}" if stack else "")

    threading.Thread(target=watch, name=f"tetrarch-stop-bound-{actor.display}", daemon=True).start()


def guard_exit(what: str, seconds: float, limit: float) -> None:
    """End this process if its interpreter finalisation takes more than ``seconds`` from now.

    Call it just before returning from the process's main. ``what`` names the process
    (``proc procs{'gpus': 0/2}``), ``limit`` is the ``TETRARCH_STOP_TIMEOUT`` the bound
    comes from (for the message).
    """
    joined = threading.Event()  # set as atexit handlers start: the non-daemon threads have ended
    atexit.register(joined.set)  # registered last, so it runs first
    faulthandler.dump_traceback_later(seconds + _BACKSTOP_S, exit=True)

    def overdue() -> None:
        threads = [t.name for t in threading.enumerate()
                   if not t.daemon and t is not threading.main_thread() and t.is_alive()]
        if threads and not joined.is_set():
            waits = f"waiting for {len(threads)} non-daemon thread(s) to end ({', '.join(threads[:5])})"
        else:
            waits = "running its atexit handlers or finalizers"
        _say(f"tetrarch: {what} was stopped but had not finished exiting when its stop's time was up "
             f"(TETRARCH_STOP_TIMEOUT={limit:g} s): it was still {waits}; it exits now without finishing "
             f"(exit code {EXIT_STUCK_FINALIZING}). Its threads:")
        try:
            faulthandler.dump_traceback(all_threads=True)
        except (OSError, ValueError, RuntimeError):
            pass
        os._exit(EXIT_STUCK_FINALIZING)

    timer = threading.Timer(seconds, overdue)
    timer.daemon = True
    timer.name = "tetrarch-exit-bound"
    timer.start()


def _say(line: str) -> None:
    """Write ``line`` to stderr and flush it and stdout (the owner receives both)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is sys.stderr:
                stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
