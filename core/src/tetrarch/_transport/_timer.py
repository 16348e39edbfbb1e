"""A one-shot timer that is a file descriptor (Linux ``timerfd``), for the I/O loop's park.

A parked I/O thread must wake once a proc's standby actor (``_runtime/actors/_standby.py``) has
been busy for :data:`~._loop.LEASE_S`, without anyone waking it and without waking
periodically: the standby arms this timer when it starts work (one syscall, no thread
wake-up; it is not disarmed, see ``LeaderLoop.standby_idle``), and the parked thread polls the
descriptor next to its wake-up ``eventfd``. ``os.timerfd_create`` exists from Python
3.13; older Pythons reach the same syscalls through ctypes.
"""

from __future__ import annotations

import ctypes
import os
import time

__all__ = ["Timer", "make_timer"]

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_LIBC: list[ctypes.CDLL] = []


def _libc() -> ctypes.CDLL:
    """The C library this interpreter is linked with, loaded once per process.

    ``CDLL(None)`` is the running program's own symbol table (libc included): no library search.
    ``ctypes.util.find_library("c")`` ran ``/sbin/ldconfig -p`` and a regex in every process that
    made a timer (a few ms of each proc's start before Python 3.13).
    """
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


class Timer:
    """A one-shot monotonic timer readable as :meth:`fileno` once it expired.

    Built for a hot path: :meth:`arm` is one syscall (about 2 µs through ctypes, with the
    delay's ``itimerspec`` built once per distinct delay).
    """

    def __init__(self) -> None:
        self._os = hasattr(os, "timerfd_create")
        self._specs: dict[float, object] = {}
        if self._os:
            self._fd = os.timerfd_create(time.CLOCK_MONOTONIC, flags=os.TFD_NONBLOCK | os.TFD_CLOEXEC)  # type: ignore[attr-defined]
            return
        libc = _libc()
        self._settime = libc.timerfd_settime  # no argtypes: plain ints and a byref convert fastest
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def arm(self, delay: float) -> None:
        """Expire once, ``delay`` seconds from now (replacing an earlier arm); 0 disarms.

        A timer already expired stays readable until :meth:`clear`."""
        if self._os:
            try:
                os.timerfd_settime(self._fd, initial=delay)  # type: ignore[attr-defined]
            except OSError:  # closed with its loop
                pass
            return
        ref = self._specs.get(delay)
        if ref is None:
            spec = _Itimerspec()
            spec.it_value.tv_sec = int(delay)
            spec.it_value.tv_nsec = int((delay - int(delay)) * 1e9)
            ref = self._specs[delay] = ctypes.byref(spec)  # the byref keeps spec alive
        self._settime(self._fd, 0, ref, None)  # an error (closed with its loop) is ignored

    def clear(self) -> None:
        """Consume an expiry (no-op if none is due)."""
        try:
            os.read(self._fd, 8)
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def make_timer() -> Timer | None:
    """A :class:`Timer`, or None where the OS has no ``timerfd`` (the park then polls)."""
    try:
        return Timer()
    except (OSError, AttributeError):
        return None
