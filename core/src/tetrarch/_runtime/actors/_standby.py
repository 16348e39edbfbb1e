"""An actor thread that reads for its proc's transport loop while it has nothing to do.

Without it a call to an actor wakes two threads in the proc: the transport's I/O thread
reads the message and then wakes the actor's thread to run it. A wake-up is a large part of
a call's cost on a small or virtual machine (docs/performance.md), so the first actor of
a proc is the loop's *standby* (:meth:`tetrarch.plugins.LeaderLoop.attach_standby`):
its event loop watches the transport loop's epoll descriptor, and while the actor is
idle it reads the message itself (``try_lead`` / ``lead_ready`` / ``leave``), so the call
runs on the thread that woke for it. The actor says when it starts work and when it is
idle again (:meth:`ActorStandby.working`); work that lasts :data:`~tetrarch._transport._loop.LEASE_S`
hands the reading back to the I/O thread (a timer wakes it between once and twice that into
the work), so a busy actor holds up the proc's other actors and its control messages for
about twice ``LEASE_S`` at most. The whole protocol: docs/architecture.md, "The transport loop".
"""

from __future__ import annotations

import asyncio
import time

from ..._config import STANDBY
from ..._log import get_logger
from ..._transport._loop import LeaderLoop

__all__ = ["ActorStandby"]

_log = get_logger("actor")


class ActorStandby:
    """The reading half of one actor thread (all methods on that thread unless said otherwise):
    a :class:`tetrarch._transport._loop.ActorStandby` to its loop."""

    def __init__(self, lloop: LeaderLoop, aloop: asyncio.AbstractEventLoop) -> None:
        """Raises ValueError if ``lloop`` takes no standby (it has no readiness descriptor)."""
        fd = lloop.readiness_fd()
        if fd is None:
            raise ValueError(f"transport loop {lloop.name!r} takes no standby")
        self._lloop = lloop
        self._aloop = aloop
        self._fd = fd
        #: Whether the actor's event loop watches the transport loop now (written on this thread;
        #: read by whoever reads for the loop, to ask for a rewatch when it lets go).
        self.watching = False
        self._busy = False
        self._ended = False
        self._idle_at = 0.0  # when the actor last went idle (time.monotonic)
        self._back_to_back = False

    @classmethod
    def attach(cls, lloop: LeaderLoop | None, aloop: asyncio.AbstractEventLoop) -> ActorStandby | None:
        """The standby for ``lloop`` on this thread's event loop ``aloop``, or None (the loop takes
        none, or another actor of the proc is its standby)."""
        if lloop is None or not STANDBY() or lloop.readiness_fd() is None:
            return None
        standby = cls(lloop, aloop)
        if not lloop.attach_standby(standby):
            return None
        standby._watch()
        return standby

    def _watch(self) -> None:
        if self.watching or self._ended:
            return
        try:
            self._aloop.add_reader(self._fd, self._on_ready)
        except (OSError, ValueError, RuntimeError):  # the transport loop closed its descriptor
            self.end()
            return
        self.watching = True

    def _unwatch(self) -> None:
        if self.watching:
            self.watching = False
            try:
                self._aloop.remove_reader(self._fd)
            except (OSError, ValueError, RuntimeError):
                pass

    def rewatch(self) -> None:
        """Watch again (any thread: the transport loop calls it once nobody else reads)."""
        try:
            self._aloop.call_soon_threadsafe(self._watch)
        except RuntimeError:  # the actor's loop is closed: it detached already
            pass

    def _on_ready(self) -> None:
        lloop = self._lloop
        if not lloop.try_lead():
            # Someone else reads (the I/O thread, or a thread waiting for a reply): stop
            # watching, or this callback would spin; the loop calls rewatch() when they stop.
            self._unwatch()
            lloop.standby_lost()
            return
        try:
            lloop.lead_ready()
        except Exception:  # noqa: BLE001 - the loop logs handler errors; this is a bug in the loop itself
            _log.exception("reading for the transport loop failed")
        finally:
            lloop.leave()

    def working(self, busy: bool) -> None:
        """The actor starts work (True) or is idle again (False)."""
        if busy is self._busy or self._ended:
            return
        self._busy = busy
        lloop = self._lloop
        if busy:
            # Back to back: this work came soon after the actor went idle (see _poll_idle).
            self._back_to_back = time.monotonic() - self._idle_at < 2 * lloop.spin_s
            lloop.standby_busy()
        else:
            lloop.standby_idle()
            if self._back_to_back:
                self._poll_idle()
            self._idle_at = time.monotonic()

    def _poll_idle(self) -> None:
        """Poll the transport loop for the next call for up to its ``spin_s`` before the actor's
        event loop sleeps (yielding the CPU between polls), while calls come back to back: a
        call that comes meanwhile costs no wake-up of a sleeping CPU (docs/performance.md)."""
        lloop = self._lloop
        if lloop.try_lead():  # else someone else reads: nothing to poll for
            try:
                lloop.spin()
            finally:
                lloop.leave()

    def end(self) -> None:
        """Stop reading for the transport loop for good (the actor ends)."""
        if self._ended:
            return
        self._ended = True
        self._unwatch()
        self._lloop.detach_standby(self)
