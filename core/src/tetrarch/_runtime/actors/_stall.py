"""Calls that wait long behind a plain async handler: said once per actor.

Plain endpoints run one at a time (Monarch's rule, kept), so a plain handler that awaits
something only a later message would provide (an ``asyncio.Event`` that an endpoint queued
behind it sets) waits forever, as it does in Monarch. Such a wait cannot be told apart from
a long but legitimate one (a timer, another actor's reply, a thread), so it is not an error;
but the actor says once, in its proc's log (which reaches the client), that calls wait
behind a handler that has been awaiting for :data:`STALL_S`, and names the fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sized

from ..._log import get_logger

__all__ = ["STALL_S", "StallWatch"]

#: How long calls may wait behind one suspended plain handler before the actor says so.
STALL_S = 10.0

_log = get_logger("actor")


class StallWatch:
    """One per actor: looks, at most every :data:`STALL_S`, whether calls still wait behind the
    plain handler that ran when it last looked (a timer per handler would cost every call)."""

    __slots__ = ("_loop", "_display", "_running", "_mailbox", "_timer", "_said")

    def __init__(self, loop: asyncio.AbstractEventLoop, display: str,
                 running: Callable[[], tuple[object, str] | None], mailbox: Sized) -> None:
        self._loop = loop
        self._display = display
        self._running = running  # a token of the plain async call running now (one per call), and its endpoint
        self._mailbox = mailbox
        self._timer: asyncio.TimerHandle | None = None
        self._said = False  # once per actor: a long handler with calls in line may be normal

    def queued_behind(self) -> None:
        """Calls are in line behind a running plain async handler (actor thread)."""
        if self._timer is None and not self._said:
            running = self._running()
            if running is not None:
                self._timer = self._loop.call_later(STALL_S, self._check, running[0])

    def _check(self, token: object) -> None:
        self._timer = None
        running = self._running()
        if running is None or not self._mailbox:
            return
        if running[0] is not token:  # another call since: watch that one
            self.queued_behind()
            return
        self._said = True
        method = running[1]
        _log.warning(
            "%s: %d message(s) have waited %g s or more behind its plain endpoint %s, which is still awaiting. "
            "Plain endpoints run one at a time: if %s waits for something a later message provides (an "
            "asyncio.Event another endpoint sets), make %s a @concurrent_endpoint (it then does not hold the "
            "actor), or send the call that provides it first",
            self._display, len(self._mailbox), STALL_S, method, method, method)
