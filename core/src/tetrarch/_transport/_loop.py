"""A transport's I/O loop: epoll over readable descriptors, posted calls and timers.

The kernel's threading contract (``_base.py``) wants a transport's handler callbacks
serialized. This loop runs them for the builtin socket transport and for plugins
(exported from ``tetrarch.plugins`` as ``IoLoop``), on its own thread or on a thread
that waits for a reply and reads for it meanwhile (a *leader*, see :class:`IoLoop`).
Other threads post work with :meth:`IoLoop.call`, which queues it on a
:class:`CallQueue` (``_call_queue.py``: an ``eventfd`` written once per batch). A
descriptor registered with :meth:`IoLoop.watch` gets its object's ``on_readable()``
called whenever it is readable (a socket, or a library's pollable descriptor such as
nng's ``recv_fd``); :meth:`IoLoop.later` runs a timer.

The concurrency of the loop (its thread roles, what each lock and wake-up descriptor
guards, and why no wake-up is lost) is specified in docs/architecture.md, "The transport
loop"; the field comments of :class:`LeaderLoop` say the same per field.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import select
import selectors
import socket
import threading
import time
import weakref
from _thread import get_ident as _get_ident
from collections.abc import Callable
from typing import Protocol

from .._log import get_logger
from ._call_queue import CallQueue, close_fds
from ._timer import Timer, make_timer

__all__ = [
    "LEASE_S",
    "PARK_MAX_S",
    "CallQueue",
    "IoLoop",
    "LeaderLoop",
    "LoopStandby",
    "Readable",
    "defer_while_dispatching",
]

#: How long the loop may go without a reader before the parked I/O thread takes it back,
#: and how long a standby's work may last before the I/O thread takes over from it.
LEASE_S = 0.002
#: How long a parked I/O thread sleeps at most between its checks while a leader goes on
#: reading: a message nobody waits for may wait about this long after such a leader left.
PARK_MAX_S = 0.02

_log = get_logger("transport")

_main_dispatch = False  # a leader on the main thread is handling messages now
_deferred: list[Callable[[], None]] = []  # signal handlers held back until that is over


def _close_quietly(fd: int, timer: Timer | None) -> None:
    """Close a loop's wake-up descriptor and timer (when the loop object is collected)."""
    close_fds({fd})
    if timer is not None:
        timer.close()


def defer_while_dispatching(fn: Callable[[], None]) -> bool:
    """Hold ``fn`` back if the main thread is in the middle of handling messages (a signal
    handler must not cut that in half); it then runs, on the main thread, right after.
    Returns whether it was held back (False: run it now yourself)."""
    if _main_dispatch and threading.current_thread() is threading.main_thread():
        _deferred.append(fn)
        return True
    return False


class Readable(Protocol):
    def on_readable(self) -> None:
        """The socket behind the registered descriptor has messages (in the loop)."""

    def on_error(self, exc: BaseException) -> None:
        """``on_readable`` raised ``exc`` (in the loop)."""


class LoopStandby(Protocol):
    """A thread that reads for a :class:`LeaderLoop` whenever it is idle (a proc's actor thread:
    ``_runtime/actors/_standby.py``), registered with :meth:`LeaderLoop.attach_standby`."""

    #: Whether it watches :meth:`LeaderLoop.readiness_fd` now (it stops after a failed
    #: :meth:`LeaderLoop.try_lead`, and says so with :meth:`LeaderLoop.standby_lost`).
    #: Written by the standby's thread only; read without a lock by whoever lets go of the loop:
    #: a stale False costs a needless rewatch, a stale True leaves the rewatch to the next one to
    #: let go (the I/O thread, which reads meanwhile, once the standby no longer covers).
    watching: bool

    def rewatch(self) -> None:
        """Watch the loop again (any thread; the loop calls it once nobody else reads)."""


class LeaderLoop:
    """An I/O loop that threads waiting for a reply may read for (the leader/follower protocol).

    Subclasses say how to wait (:meth:`_wait`), how to handle what the wait returned
    (:meth:`_dispatch`) and what to release at the end (:meth:`_close`), then call
    :meth:`_start`; :class:`IoLoop` is the selector one (builtin and nng transports), the
    zmq plugin has one over an epoll set of the zmq sockets' descriptors.

    *Leaders and followers.* A thread blocked on a reply this loop will deliver may read
    for the loop itself, instead of sleeping while the I/O thread reads and then wakes it
    (a thread wake-up is a large part of a call's cost on a small or virtual machine:
    docs/performance.md). :meth:`try_lead` hands it the loop (wait, dispatch, timers)
    when nobody else reads, and :meth:`leave` gives it back. A waiting thread that finds
    someone else reading counts as a follower (:meth:`follow`): it sleeps as before, and
    asks the I/O thread to step aside (park) once no follower is left, so the next wait
    leads. A parked I/O thread takes the loop back once the loop has gone without a reader
    for :data:`LEASE_S` (it checks that often, and up to :data:`PARK_MAX_S` apart while a
    leader goes on reading), when a leader leaves with followers still asleep, when a call
    is posted with nobody reading, and on stop; a take-back always reads before the thread
    steps aside again. So a message nobody waits for is read within about
    :data:`PARK_MAX_S`. Whoever reads holds one lock (``_role``): handler callbacks never
    run concurrently, and :meth:`in_loop` is true on that thread only.

    *A standby* (:class:`LoopStandby`, one at most: a proc's actor thread) reads for the loop
    whenever it is idle, from its own event loop watching :meth:`readiness_fd`, so a call
    to that actor wakes one thread, not the I/O thread and then the actor. While it is
    attached, idle and watching, the parked I/O thread sleeps without a timeout (an unpark
    or the standby's timer wakes it); the standby says when it starts work
    (:meth:`standby_busy`, which arms the timer) and when it is idle again
    (:meth:`standby_idle`), and the I/O thread takes the loop back once that work has run
    for :data:`LEASE_S` (the timer wakes it, within twice that) or the standby stopped
    watching.

    Each field below says which thread writes it and what guards it; the lock order is
    ``_role`` before ``_wlock`` (docs/architecture.md, "The transport loop").
    """

    def __init__(self, name: str) -> None:
        self.name = name
        # The parked I/O thread sleeps on this eventfd (and the standby's timer).
        self._park_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._timer = make_timer()
        # Closed when the loop object goes, not when the loop ends: other threads may still
        # write to them (an unpark, a standby's timer), and a number closed early could meanwhile
        # name another descriptor (a socket) that their 8 bytes would then corrupt.
        # Not at exit (weakref.finalize's default): an I/O thread may still run then.
        weakref.finalize(self, _close_quietly, self._park_fd, self._timer).atexit = False
        self._parker = select.poll()
        self._parker.register(self._park_fd, select.POLLIN)
        if self._timer is not None:
            self._parker.register(self._timer.fileno(), select.POLLIN)
        # Held by the one thread that reads for the loop (the I/O thread, or a leader: a waiting
        # thread or the standby). Guards what reading touches: the wait set, the timers, the call
        # queue's owner, _left, led, _guard and the handlers' state. Taken without blocking, except
        # once by the I/O thread when it starts.
        self._role = threading.Lock()
        # Guards _followers (+= and -= from any thread) and every write of _want and _parked;
        # the I/O thread releases _role (stepping aside) and re-checks after taking it (taking
        # the loop back) in the same hold, and follow() counts itself in a hold before it tries
        # to lead: so a counted follower is seen, or finds the loop free. Also serializes
        # attach/detach_standby. Taken inside _role and inside futures' _CB_LOCK, never around
        # them; nothing blocks while holding it.
        self._wlock = threading.Lock()
        # Threads asleep waiting for the loop to deliver. Read without _wlock by leave(), after
        # it released _role (a follower counts itself before it tries to lead: that try succeeds
        # or leave() sees the count), and by _run's pre-check (decided again under _wlock).
        self._followers = 0
        # A request that the reading I/O thread step aside after its current turn, once no
        # follower is left: set by follow(), and by standby_idle() while the I/O thread is not
        # parked; cleared when it steps aside, and when it takes the loop back with no follower
        # counted (a request made while it was parked was answered by whoever read meanwhile).
        # Read without _wlock only by _run's pre-check: one attribute load, atomic under the
        # GIL, whose staleness costs one turn.
        self._want = False
        # The I/O thread is stepping aside (it does not read); standby_idle() reads it without
        # _wlock first (a stale True skips a request the next call's standby_idle() makes again).
        self._parked = False
        # The standby (attach/detach on its own thread); read without a lock (one load) by _cover.
        self._standby: LoopStandby | None = None
        # When the standby started the work it is doing (None: idle): its thread writes it, _cover reads it.
        self._busy_since: float | None = None
        self._timer_due = 0.0  # when the standby's timer fires (time.monotonic; in the past: it did)
        #: Calls posted to the loop (run by whoever reads for it).
        self.queue = CallQueue(self._orphan)
        # Set once, in the loop (the reader runs _stop_now); read by any thread.
        self._stopped = False
        # The leader is the main thread: SIGINT waits until a dispatch is over (under _role).
        self._guard = False
        self._main_ident = threading.main_thread().ident
        #: A thread other than the I/O thread reads for the loop now (a leader). Written under
        #: ``_role``; read without a lock by ``Future._finish``, which marks its future done and
        #: then reads this to kick a leader, while a leader sets this and then checks its future:
        #: one of the two sees the other's write.
        self.led = False
        #: How long a leader that asks for it polls for events before it sleeps
        #: (:meth:`lead_once`; the kernel sets it from ``TETRARCH_SPIN_US``).
        self.spin_s = 0.0
        self._left = 0.0  # when the last reader let go of the loop (written under _role)
        #: The loop's own thread (started by :meth:`_start`).
        self.thread = threading.Thread(target=self._run, name=f"tetrarch-io-{name}", daemon=True)

    # -- what a subclass provides ---------------------------------------------
    def _start(self) -> None:
        self.thread.start()

    def _wait(self, timeout: float | None) -> list:
        """Wait up to ``timeout`` seconds (None: no limit) for events; return them."""
        raise NotImplementedError

    def _dispatch(self, events: list) -> None:
        """Handle ``events`` (run posted calls, readers, due timers)."""
        raise NotImplementedError

    def _close(self) -> None:
        """Release the loop's resources (its thread, at the end, holding the loop)."""

    def readiness_fd(self) -> int | None:
        """A descriptor that is readable while the loop has something to handle (an epoll
        set), for a :class:`LoopStandby` to watch; None: this loop takes no standby."""
        return None

    def _needs_thread(self) -> bool:
        """Whether the loop has work a standby cannot do (it only reads when its descriptor is
        readable; zmq's retry of pushed-back sends needs timed waits): the I/O thread then reads.

        Any thread, maybe holding the loop's internal lock: a quick look at plain fields, no
        blocking and no lock of its own."""
        return False

    # -- common ---------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        """Whether the loop is ending (or ended)."""
        return self._stopped

    def in_loop(self) -> bool:
        """Whether the calling thread reads for the loop now (the I/O thread, or a leader)."""
        return self.queue.in_loop()

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the thread that reads for the loop (now, if that is this one)."""
        self.queue.call(fn)

    def _has_work(self, events: list) -> bool:
        """Whether a zero-timeout :meth:`_wait` that returned ``events`` found anything to handle."""
        return bool(events)

    def _once(self, timeout: float | None) -> None:
        self._handle(self._wait(timeout))

    def _handle(self, events: list) -> None:
        if not self._guard:
            self._dispatch(events)
            return
        global _main_dispatch
        _main_dispatch = True  # see defer_while_dispatching
        try:
            self._dispatch(events)
        finally:
            _main_dispatch = False
        while _deferred:
            _deferred.pop(0)()

    def _run(self) -> None:
        self._role.acquire()
        self.queue.bind()
        try:
            while not self._stopped:
                # A pre-check without _wlock: _step_aside decides again under it.
                if self._want and not self._followers and self._step_aside():
                    continue
                self._once(None)
        finally:
            try:
                self._close()
            finally:
                self._role.release()

    def _unpark(self) -> None:
        """Wake the I/O thread if it is parked (it then checks whether it must read)."""
        try:
            os.eventfd_write(self._park_fd, 1)
        except OSError:  # EAGAIN: the counter is full, so a wake-up is pending anyway
            pass

    def _orphan(self) -> None:
        """A call was posted while nobody reads: the I/O thread runs it, unless the standby will."""
        if self._cover(time.monotonic()) <= 0:
            self._unpark()

    def _cover(self, now: float) -> float:
        """For how many more seconds the standby reads for the loop (0: it does not; inf: while idle)."""
        standby = self._standby
        if standby is None or not standby.watching or self._needs_thread():
            return 0.0
        since = self._busy_since
        if since is None:
            return math.inf
        return max(0.0, LEASE_S - (now - since))

    def _park(self, timeout: float | None) -> None:
        """Sleep until unparked, the standby's timer expired, or ``timeout`` (I/O thread)."""
        self._parker.poll(None if timeout is None else max(1, math.ceil(timeout * 1000)))
        try:
            os.eventfd_read(self._park_fd)
        except OSError:
            pass
        if self._timer is not None:
            self._timer.clear()

    def _must_read(self, now: float) -> bool:
        """Whether the I/O thread (holding the loop and ``_wlock`` after parking) must read now."""
        if self._stopped:
            return True
        if self._cover(now) > 0:
            return False
        return bool(self._followers) or self.queue.pending() or now - self._left >= LEASE_S

    def _step_aside(self) -> bool:
        """Let waiting threads (and the standby) read; return holding the loop again (I/O thread).

        False: a thread began to follow since :meth:`_run` looked, so the I/O thread reads on
        (it never stepped aside)."""
        with self._wlock:  # one hold with follow(): a follower counted now is seen here
            if self._followers:
                return False
            self._want = False
            self._parked = True
            self.queue.unbind()
            self._left = time.monotonic()
            self._role.release()
        standby = self._standby
        if standby is not None and not standby.watching:
            standby.rewatch()
        interval = LEASE_S
        while True:
            cover = self._cover(time.monotonic())
            if cover <= 0:
                self._park(interval)
            elif cover < math.inf:
                self._park(cover)  # the standby's work reaches LEASE_S then
            else:  # the standby is idle: its timer wakes us once it has worked for LEASE_S
                self._park(None if self._timer is not None else LEASE_S)
            if self._role.acquire(False):
                with self._wlock:  # one hold with follow(), as above
                    if self._must_read(time.monotonic()):
                        self._parked = False
                        if not self._followers:
                            self._want = False  # asked while parked: answered by whoever read meanwhile
                        break
                    self._role.release()
                interval = LEASE_S
            else:  # a leader reads now: check less often while it goes on reading
                interval = min(interval * 2, PARK_MAX_S)
        self.queue.bind()
        return True

    def _stop_now(self) -> None:
        """Mark the loop stopping (in the loop) and get the I/O thread back to end it."""
        self._stopped = True
        self._unpark()

    def _join(self, wait: float) -> None:
        """Wait for the I/O thread to end, unless this thread reads for the loop (it would wait on itself)."""
        if wait > 0 and not self.in_loop() and threading.current_thread() is not self.thread:
            self.thread.join(wait)

    # -- leaders and followers (threads waiting for something the loop delivers) --
    def try_lead(self) -> bool:
        """Read for the loop on this thread if nobody else does; True: call :meth:`lead_once`
        until the awaited thing happened, then :meth:`leave` (always, in a ``finally``)."""
        if self._stopped or self.queue.in_loop() or not self._role.acquire(False):
            return False
        if self._stopped:
            self._role.release()
            return False
        self.queue.bind()
        self._guard = _get_ident() == self._main_ident
        self.led = True
        return True

    def lead_once(self, deadline: float | None, poll: bool = False) -> bool:
        """Wait for and handle this loop's events once, until ``deadline`` (``time.monotonic``)
        at the latest; False once the deadline passed or the loop is stopping (leader only).

        ``poll``: poll for up to :attr:`spin_s` first, yielding the CPU between polls (a
        reply that comes meanwhile costs no sleep and wake-up of this thread).
        """
        if self._stopped:
            return False
        if poll and self.spin_s > 0 and self.spin(deadline):
            return True
        timeout = None
        if deadline is not None:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                return False
        self._once(timeout)
        return True

    def spin(self, deadline: float | None = None) -> bool:
        """Poll for events, yielding the CPU between polls, until some come (handled: True),
        :attr:`spin_s` or ``deadline`` passed, or the loop stops (leader only)."""
        end = time.monotonic() + self.spin_s
        if deadline is not None:
            end = min(end, deadline)
        while True:
            events = self._wait(0)
            if self._has_work(events):
                self._handle(events)
                return True
            if self._stopped or time.monotonic() >= end:
                return False
            os.sched_yield()  # a runnable thread of this CPU goes first

    def lead_ready(self) -> None:
        """Handle what is ready now, without waiting (leader only; a standby's turn)."""
        if not self._stopped:
            self._once(0)

    def leave(self) -> None:
        """Stop reading for the loop (leader only); wakes the I/O thread if a follower still
        sleeps or the loop is stopping, and asks the standby to watch again if it stopped."""
        self.led = False
        self._guard = False
        self.queue.unbind()
        self._left = time.monotonic()
        self._role.release()
        if self._followers or self._stopped:
            self._unpark()
        standby = self._standby
        if standby is not None and not standby.watching:
            standby.rewatch()

    # -- the standby -----------------------------------------------------------
    def attach_standby(self, standby: LoopStandby) -> bool:
        """Make ``standby`` the loop's standby; False if the loop takes none or has one already."""
        with self._wlock:
            if self._stopped or self._standby is not None or self.readiness_fd() is None:
                return False
            self._standby = standby
            self._busy_since = None
        return True

    def detach_standby(self, standby: LoopStandby) -> None:
        """``standby`` no longer reads for the loop (it stopped watching first): the I/O thread reads."""
        with self._wlock:
            if self._standby is not standby:
                return
            self._standby = None
            self._busy_since = None
        self._unpark()

    def standby_busy(self) -> None:
        """The standby starts work: the I/O thread takes over if it lasts :data:`LEASE_S` (standby thread).

        The timer is armed for twice LEASE_S, and only when it would fire less than LEASE_S
        from now: the parked thread wakes between LEASE_S and twice that into the work (and
        parks for the rest of LEASE_S if woken early), and calls that come back to back arm it
        once per LEASE_S, not once each. An arm costs a syscall; one for less than the
        scheduler tick also reprograms the CPU's timer, which on a VM is an exit to the host
        (docs/performance.md measures both).
        """
        self._busy_since = now = time.monotonic()
        # Without a timer, the parked thread checks every LEASE_S.
        if self._timer is not None and self._timer_due - now < LEASE_S:
            self._timer_due = now + 2 * LEASE_S
            self._timer.arm(2 * LEASE_S)

    def standby_idle(self) -> None:
        """The standby is idle again and reads for the loop (standby thread).

        The timer stays armed (a syscall per call saved): when it fires with the standby
        idle, the I/O thread finds it covering and parks again; calls closer than
        LEASE_S apart re-arm it before it fires, so that happens once per burst.
        """
        self._busy_since = None
        if not self._parked:  # the usual case (parked) takes no lock
            # The I/O thread reads (the standby's last work outlasted LEASE_S): it steps
            # aside after its next turn. Not while it is parked: a request then would be
            # stale by the time it takes the loop back (see _want).
            with self._wlock:
                if not self._parked:
                    self._want = True

    def standby_lost(self) -> None:
        """The standby stopped watching (someone else read when it tried): the I/O thread
        takes the loop unless that reader goes on (standby thread)."""
        self._unpark()

    def follow(self) -> bool:
        """Count the calling thread as waiting for the loop to deliver (it sleeps meanwhile);
        False (not counted) if it can lead after all (then it must lead)."""
        with self._wlock:
            self._followers += 1
            self._want = True
        # Counted before it tries: whoever lets go of the loop from now on sees the count
        # (the I/O thread under _wlock, a leader in leave()), or this try succeeds.
        if self.try_lead():  # the leader may have left in between
            self.followed()
            return False
        return True

    def followed(self) -> None:
        """A follower's wait ended (its thing happened, or it gave up)."""
        with self._wlock:
            self._followers -= 1

    def kick(self) -> None:
        """Wake whoever reads for the loop (a leader's awaited thing happened elsewhere)."""
        self.queue.wake()


class IoLoop(LeaderLoop):
    """An epoll loop over readable descriptors, posted calls and timers (see :class:`LeaderLoop`
    for who runs it)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._sel = selectors.DefaultSelector()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._sel.register(self.queue.fileno(), selectors.EVENT_READ, None)
        self._start()

    def later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` in the loop after ``delay`` seconds (call from within the loop)."""
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), fn))

    def watch(self, fd: int | socket.socket, obj: Readable) -> None:
        """Call ``obj.on_readable()`` whenever ``fd`` (a descriptor or a socket) is readable (in the loop)."""
        self._sel.register(fd, selectors.EVENT_READ, obj)

    def unwatch(self, fd: int | socket.socket) -> None:
        """Stop watching ``fd``, before the socket that owns it is closed (in the loop)."""
        try:
            self._sel.unregister(fd)
        except (KeyError, ValueError, OSError):
            pass

    def _wait(self, timeout: float | None) -> list:
        if self._timers:
            due = max(0.0, self._timers[0][0] - time.monotonic())
            timeout = due if timeout is None else min(timeout, due)
        return self._sel.select(timeout)

    def _dispatch(self, events: list) -> None:
        queue = self.queue
        for key, _ in events:
            obj = key.data
            if obj is None:
                queue.run_pending()
                continue
            try:
                obj.on_readable()
            except Exception as exc:  # noqa: BLE001 - a handler bug closes one connection only
                _log.error("%s transport: closing after a handler error: %r", self.name, exc)
                obj.on_error(exc)
        if self._timers:
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                fn = heapq.heappop(self._timers)[2]
                try:
                    fn()
                except Exception:  # noqa: BLE001
                    _log.exception("%s transport: a timer failed", self.name)

    def readiness_fd(self) -> int | None:
        return self._sel.fileno()

    def _close(self) -> None:
        self._sel.close()

    def stop(self, before: Callable[[], None] | None = None, *, wait: float = 5.0) -> None:
        """Run ``before`` in the loop, then end it; wait up to ``wait`` seconds for the I/O
        thread (not when called from within the loop). Idempotent."""

        def do() -> None:
            if self._stopped:
                return
            if before is not None:
                before()
            self._stop_now()

        self.call(do)
        self._join(wait)
