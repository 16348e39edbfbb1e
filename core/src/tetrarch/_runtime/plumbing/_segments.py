"""Shared-memory segments for large payloads: a bounded pool of reused, pre-faulted ``memfd`` files.

A segment is an anonymous shared-memory file (``memfd_create``) that this process maps
whole and keeps open. Another process of the same host, user and pid namespace maps the
same memory by opening ``/proc/<our pid>/fd/<fd>`` (allowed between processes that may
inspect each other: same user, dumpable). Nothing has a name in ``/dev/shm``, so nothing
can leak there: the kernel frees a segment's memory when its last descriptor and mapping
are gone, however the processes ended (``SIGKILL`` of any of them included).

Layout: a page of header, then the data (page-aligned)::

    [0:16]   token (random; a receiver checks it against the descriptor)
    [64]     state: FREE, BUSY (lent, not yet held), HELD (holders hold locks) or RETIRED (closed)

The owner takes a FREE segment, marks it BUSY for a holder (another process, or itself for
a receive buffer), and fills it. Each process that maps it for a message holds an open
file description of it with a shared lock on its first byte (an OFD lock, ``F_OFD_SETLK``)
and marks it HELD; the lock goes when the last view of that message dies (a finalizer on
the buffer object its arrays and tensors keep alive, :func:`lend`; never a timer) or when
the process dies (the kernel drops its locks). The owner reuses a HELD segment once no lock
is left on it: so a holder may pass its arrays on to a third process (``_shm_wire``
forwards them by reference), which takes a lock of its own before the holder lets go.
A segment still BUSY whose holder died is taken back. Reusing segments is what makes the
path fast: a page touched the first time costs far more than a copy into it (about 1 GB/s
against 12 GB/s on the development VM).

The pool is bounded (``TETRARCH_SHM_POOL_BYTES``: idle and lent segments together); past
it, or where memfd or ``/proc`` is missing, callers fall back to the socket with one
warning that names the setting.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import logging
import mmap
import os
import secrets
import struct
import threading
import time
import warnings
import weakref
from typing import Any

from ... import _config

__all__ = ["FREE", "HEADER", "Segment", "Tickets", "holding", "host_key", "lease_of", "lend", "new_lease", "pool",
           "release_all_for_tests", "tickets"]

_log = logging.getLogger("tetrarch.shm")

#: Bytes before a segment's data (one page: the data stays page-aligned).
HEADER = 4096
_STATE = 64
FREE, BUSY, RETIRED, HELD = 0, 1, 2, 3
#: ``struct flock`` (Linux, 64-bit ``off_t``): type, whence, start, len, pid.
_FLOCK = struct.Struct("@hhqqi0q")
#: Segment sizes are multiples of this.
_GRAIN = 1 << 20
#: A free segment more than this many times larger than asked is not used for a small payload.
_WASTE = 4
_MADV_POPULATE_WRITE = 23  # Linux 5.14; Python 3.11's mmap module lacks the name


class ShmWarning(UserWarning):
    """Shared memory could not carry a payload; it went through the socket instead."""


def _start_time(pid: int) -> int | None:
    """The start time of ``pid`` (clock ticks since boot), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


class Segment:
    """One memfd of this process, mapped whole; ``size`` bytes of data after the header."""

    __slots__ = ("fd", "inode", "size", "mm", "token", "holder", "registered", "__weakref__")

    def __init__(self, size: int) -> None:
        """Raises OSError: the kernel refused (no memfd, out of memory)."""
        fd = os.memfd_create("tetrarch-payload", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, HEADER + size)
            mm = mmap.mmap(fd, HEADER + size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        try:
            mm.madvise(_MADV_POPULATE_WRITE)  # fault it in now: ENOMEM here, never SIGBUS in a copy later
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS):  # EINVAL: a kernel before 5.14 (pages fault on use)
                mm.close()
                os.close(fd)
                raise
        self.fd, self.inode, self.size, self.mm = fd, os.fstat(fd).st_ino, size, mm
        self.token = secrets.token_bytes(16)
        mm[0:16] = self.token
        mm[_STATE] = FREE
        #: ``(pid, start time)`` of the process it was last lent to.
        self.holder: tuple[int, int | None] = (0, None)
        #: The address CUDA pinned it at (:meth:`register_with_cuda`), 0 if never.
        self.registered = 0

    @property
    def state(self) -> int:
        return self.mm[_STATE]

    def take(self, pid: int) -> None:
        self.mm[_STATE] = BUSY
        self.holder = (pid, None if pid == os.getpid() else _start_time(pid))

    def reclaim(self) -> int:
        """Its state, after taking it back (FREE) if its holder died or every holder let go."""
        state = self.mm[_STATE]
        if (state == BUSY and self.holder_dead()) or (state == HELD and not _held(self.fd)):
            self.mm[_STATE] = state = FREE
        return state

    def holder_dead(self) -> bool:
        """Whether the process it is lent to has ended (its mappings are gone)."""
        pid, start = self.holder
        return pid != os.getpid() and (start is None or _start_time(pid) != start)

    def register_with_cuda(self) -> bool:
        """Pin it for CUDA copies (``cudaHostRegister``, once: about 50 µs per MiB); False where CUDA refuses."""
        if not self.registered:
            import torch

            addr = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
            if int(torch.cuda.cudart().cudaHostRegister(addr, len(self.mm), 0)) != 0:
                return False
            self.registered = addr
        return True

    def close(self) -> None:
        self.mm[_STATE] = RETIRED  # a receiver's cached mapping of it lets go at its next look
        if self.registered:  # before the mapping can go
            import torch

            torch.cuda.cudart().cudaHostUnregister(self.registered)
            self.registered = 0
        try:
            self.mm.close()
        except BufferError:  # still viewed here: the mapping goes with the last view
            pass
        os.close(self.fd)


def _hold(fd: int) -> bool:
    """Take a shared lock on the first byte of ``fd``'s file for ``fd``'s open file description."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_RDLCK, os.SEEK_SET, 0, 1, 0))
        return True
    except (OSError, AttributeError):  # no OFD locks (a kernel before 3.15)
        return False


def _held(fd: int) -> bool:
    """Whether another open file description holds a lock on the first byte of ``fd``'s file."""
    try:
        got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0))
    except (OSError, AttributeError):
        return True  # cannot tell: never reuse it
    return _FLOCK.unpack(got)[0] != fcntl.F_UNLCK


class _Lease:
    """The hold of one message on a segment (or on another shared file) while views of it live.

    ``fd``: an open file description of the file holding a shared lock on it (a pooled
    segment, ``locked``) or merely keeping it open (a shared tensor's file); -1 where none
    could be had, and then a pooled segment is marked FREE when the lease dies, as its
    only holder. ``inode``, ``base`` and ``size``: the file and where this process maps it,
    so that arrays over it can be passed on by reference (:func:`lease_of`).
    """

    __slots__ = ("mm", "fd", "inode", "base", "size", "locked", "__weakref__")

    def __init__(self, mm: mmap.mmap, fd: int = -1, inode: int = 0, locked: bool = False) -> None:
        self.mm, self.fd, self.inode, self.locked = mm, fd, inode, locked
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(mm)) if fd >= 0 else 0
        self.size = len(mm)
        if fd >= 0:
            _live.add(self)

    def __del__(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)  # the lock goes with it
            except OSError:
                pass
            return
        try:
            if self.mm[_STATE] == BUSY:
                self.mm[_STATE] = FREE
        except (ValueError, IndexError):  # the mapping is closed (interpreter exit)
            pass


_live: weakref.WeakSet[_Lease] = weakref.WeakSet()


def lend(mm: mmap.mmap, offset: int, nbytes: int, lease: _Lease | None) -> memoryview:
    """A writable byte view of ``mm[offset:offset + nbytes]`` that keeps ``lease`` (and ``mm``) alive.

    Arrays and tensors rebuilt over the view keep it alive; when the last of them (and of
    the other views sharing ``lease``) dies, the lease lets go of the segment.
    """
    array: Any = (ctypes.c_char * nbytes).from_buffer(mm, offset)
    array._tetrarch_lease = lease if lease is not None else mm
    return memoryview(array).cast("B")


def new_lease(mm: mmap.mmap, path: str | None = None, inode: int = 0, pooled: bool = True, fd: int = -1) -> _Lease:
    """A lease on ``mm``, the mapping of the file ``inode`` at ``path`` (``/proc/<pid>/fd/<n>``), or of
    the one ``fd`` (a description of it the caller opened and checked; the lease owns it from now on).

    For a pooled segment (``pooled``) it takes a shared lock and marks the segment HELD; a
    plain shared file is only kept open. Without a file description (neither given, or it
    cannot be opened or locked) the lease marks a pooled segment FREE when it dies.
    """
    if fd < 0:
        if path is None:
            return _Lease(mm)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return _Lease(mm)
        if os.fstat(fd).st_ino != inode:
            os.close(fd)
            return _Lease(mm)
    if pooled and not _hold(fd):
        os.close(fd)
        return _Lease(mm)
    if pooled:
        mm[_STATE] = HELD
    return _Lease(mm, fd, inode, pooled)


def holding() -> bool:
    """Whether this process holds any lease that can be passed on (:func:`lease_of` can find one)."""
    return bool(_live)


def lease_of(address: int, nbytes: int) -> _Lease | None:
    """The live lease whose mapping holds ``[address, address + nbytes)`` and can be passed on, if any."""
    for lease in list(_live):
        if lease.base <= address and address + nbytes <= lease.base + lease.size:
            return lease
    return None


class Pool:
    """The segments of this process, idle and lent, within ``TETRARCH_SHM_POOL_BYTES`` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._segments: list[Segment] = []
        self._bytes = 0
        self._broken = ""  # why memfd segments cannot be made here (said once)
        self._warned = False

    @property
    def nbytes(self) -> int:
        """Bytes of segments held now (idle and lent)."""
        return self._bytes

    def take(self, nbytes: int, holder: int) -> Segment | None:
        """A segment of at least ``nbytes``, marked BUSY for ``holder``; None (warned once) when none fits."""
        if self._broken:
            return None
        cap = _config.SHM_POOL_BYTES()
        with self._lock:
            seg = self._find(nbytes)
            if seg is None:
                size = -(-nbytes // _GRAIN) * _GRAIN
                if not self._room(size, cap):
                    self._warn(f"the shared-memory pool of this process is full ({self._bytes >> 20} MiB held, "
                               f"TETRARCH_SHM_POOL_BYTES={cap}); payloads go through the socket until receivers "
                               "drop what they hold. Raise TETRARCH_SHM_POOL_BYTES, or drop received tensors "
                               "sooner")
                    return None
                try:
                    seg = Segment(size)
                except OSError as exc:
                    if exc.errno in (errno.ENOMEM, errno.ENOSPC):
                        self._warn(f"no memory for a {size >> 20} MiB shared-memory segment ({exc}); payloads go "
                                   "through the socket. Lower TETRARCH_SHM_POOL_BYTES or free memory")
                        return None
                    self._broken = f"shared-memory segments are not available here ({exc})"
                    self._warn(f"{self._broken}; payloads go through the socket. Set TETRARCH_SHM_PAYLOADS=0 "
                               "to stop trying")
                    return None
                self._segments.append(seg)
                self._bytes += size
            seg.take(holder)
            return seg

    def give_back(self, seg: Segment) -> None:
        """``seg`` was never handed to its holder (the send failed): FREE again."""
        seg.mm[_STATE] = FREE

    def _find(self, nbytes: int) -> Segment | None:
        best = None
        for seg in self._segments:
            if seg.size >= nbytes and (best is None or seg.size < best.size):
                state = seg.reclaim()
                if state == FREE:
                    best = seg
        if best is not None and best.size > _WASTE * nbytes + _GRAIN:
            return None
        return best

    def _room(self, size: int, cap: int) -> bool:
        """Whether ``size`` more bytes fit under ``cap``, closing idle segments (least recently made first)."""
        if size > cap:
            return False
        for seg in list(self._segments):
            if self._bytes + size <= cap:
                break
            if seg.reclaim() == FREE:
                self._segments.remove(seg)
                self._bytes -= seg.size
                seg.close()
        return self._bytes + size <= cap

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(message, ShmWarning, stacklevel=4)
        _log.debug("%s", message)

    def close(self) -> None:
        """Close every segment (the process is leaving, or a test resets it)."""
        with self._lock:
            for seg in self._segments:
                seg.close()
            self._segments.clear()
            self._bytes = 0


#: Slots of a ticket table (one byte each): shared files named to receivers not yet mapped at once.
_TICKETS = 1 << 16


class Tickets:
    """Keeps a file this process named to a receiver (a shared tensor's storage) open until the receiver mapped it.

    A ticket is one byte of a small segment: BUSY while the receiver has yet to map the
    file, set FREE by the receiver once it has (its mapping or its own lock then keeps the
    memory). The object that holds the file open (or a segment locked, for a payload passed
    on) is kept with the ticket until then, or until the receiver is found dead: a thread of
    this table looks every few milliseconds while tickets are out (usually one message's
    time), and sleeps otherwise. Thread-safe.
    """

    #: How often the table looks at its tickets while some are out.
    POLL_S = 0.005

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seg: Segment | None = None
        self._held: dict[int, tuple[Any, tuple[int, int | None]]] = {}
        self._next = 0
        self._out = threading.Event()  # set while tickets are out
        self._watcher: threading.Thread | None = None

    def take(self, keep: Any, holder: int) -> tuple[Segment, int] | None:
        """A BUSY slot of the table for ``holder``, keeping ``keep`` alive until it is FREE; None when full."""
        with self._lock:
            if self._seg is None:
                try:
                    self._seg = Segment(_TICKETS)
                except OSError:
                    return None
            seg = self._seg
            self._sweep(seg)
            if len(self._held) >= _TICKETS:
                return None
            slot = self._next
            while slot in self._held:
                slot = (slot + 1) % _TICKETS
            self._next = (slot + 1) % _TICKETS
            seg.mm[HEADER + slot] = BUSY
            self._held[slot] = (keep, (holder, _start_time(holder)))
            self._out.set()
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="tetrarch-tickets", daemon=True)
                self._watcher.start()
            return seg, slot

    def _watch(self) -> None:
        """Let go of what tickets keep as soon as their receivers took it over (no wait while none is out)."""
        while self._out.wait():
            time.sleep(self.POLL_S)
            with self._lock:
                if self._seg is not None:
                    self._sweep(self._seg)
                if not self._held:
                    self._out.clear()

    def give_back(self, slot: int) -> None:
        with self._lock:
            if self._seg is not None and self._held.pop(slot, None) is not None:
                self._seg.mm[HEADER + slot] = FREE

    @property
    def held(self) -> int:
        """Tickets whose receiver has not mapped its file yet (as of the last sweep)."""
        with self._lock:
            if self._seg is not None:
                self._sweep(self._seg)
            return len(self._held)

    def _sweep(self, seg: Segment) -> None:
        mm = seg.mm
        for slot, (_, (pid, start)) in list(self._held.items()):
            if mm[HEADER + slot] == FREE or start is None or _start_time(pid) != start:
                del self._held[slot]


_pool: Pool | None = None
_tickets: Tickets | None = None
_pool_lock = threading.Lock()


def pool() -> Pool:
    """This process's pool."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = Pool()
    return _pool


def tickets() -> Tickets:
    """This process's ticket table."""
    global _tickets
    if _tickets is None:
        with _pool_lock:
            if _tickets is None:
                _tickets = Tickets()
    return _tickets


def _after_fork() -> None:
    global _pool, _tickets
    _pool = _tickets = None  # the child's mappings are copies of the parent's segments: never lend them
    # The host key stays: a fork keeps the boot, the user, both namespaces and the dumpable flag,
    # so the zygote computes it once for every proc it forks (about a millisecond of CPU each).


os.register_at_fork(after_in_child=_after_fork)


def release_all_for_tests() -> None:
    """Close this process's pool (tests)."""
    global _pool
    if _pool is not None:
        _pool.close()
        _pool = None


_key: str | None = None


def _ns(name: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{name}")
    except OSError:
        return ""


def _usable() -> bool:
    """Whether peers may map our segments: memfd exists, /proc is there, and we are dumpable."""
    if not hasattr(os, "memfd_create") or not os.path.isdir(f"/proc/{os.getpid()}/fd"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(3, 0, 0, 0, 0) == 1  # PR_GET_DUMPABLE: /proc/<pid>/fd is ours alone otherwise
    except (OSError, AttributeError):
        return False


def host_key() -> str:
    """A key equal in two processes exactly when each can map the other's segments ("" when not here).

    Same boot, user, pid namespace (a pid names the same process) and network namespace
    (tetrarch's emulated hosts are network namespaces: they stay separate hosts).
    """
    global _key
    if _key is None:
        if not _usable():
            _key = ""
        else:
            try:
                with open("/proc/sys/kernel/random/boot_id") as f:
                    boot = f.read().strip()
            except OSError:
                boot = ""
            parts = (boot, str(os.getuid()), _ns("pid"), _ns("net"))
            _key = hashlib.sha256("|".join(parts).encode()).hexdigest()[:24] if all(parts) else ""
    return _key
