"""Large payloads between two processes of one host: through shared memory instead of the socket.

The router calls :func:`outgoing` on a message to a peer whose handshake showed the same
:func:`~._segments.host_key`, and :func:`incoming` on every message it receives.

Sender: when the out-of-band frames of a message (frames 2 on: the buffers of
``_serial.dumps``, numpy arrays and tensors) total at least ``TETRARCH_SHM_MIN_BYTES``, they
are copied once into one segment of the pool (:mod:`._segments`), and the message leaves
with those frames empty and a prefix on its header frame that says where they are::

    b"\\0S" | count (u16) | count x entry | the original header

    entry: frame index (u16), kind (u8), pid (i32), fd (i32), inode (u64), token (16 bytes),
           offset (u64), nbytes (u64), ticket table fd (i32), its inode (u64), slot (u32)

A frame that already lives in shared memory (a torch tensor after ``share_memory_()``,
file-descriptor strategy) is not copied: its entry (kind ``_SHARED``) names the tensor's
own file, and the receiver maps that (the receiver then shares the sender's memory, as
with ``torch.multiprocessing``). The sender keeps the tensor (and so its file) open until
the receiver has mapped it: a ticket (:class:`~._segments.Tickets`; the entry's token is
the ticket table's) that the receiver clears once mapped. Copied frames (kind ``_COPIED``)
are the receiver's own: the sender's later writes to its tensor do not reach them.

Receiver: maps the segment (``/proc/<pid>/fd/<fd>``, checked against inode and token;
mappings of the pool's segments are cached, so a reused segment costs nothing to map
again), holds it (a lock of its own, :mod:`._segments`) and hands the unpickler writable
views of it. The segment goes back to the sender's pool when the last array or tensor over
those views dies, in every process that holds it.

Passed on: an array or tensor this process received through shared memory (a segment,
or a shared tensor's file) and sends to another process of the host goes by reference
too, no copy: its entry (kind ``_FORWARDED`` for a segment, ``_SHARED`` for a file) names
this process's own descriptor of the file and a ticket, as for shared tensors. The
receiver takes its hold (the lock) before it clears the ticket, and only then does this
process let go of its own; so the segment's owner never reuses it under a holder. The
receivers then share the memory, as with any tensor already in shared memory.
A segment that cannot be mapped (the sender died right after sending) makes the message
undeliverable: :class:`Unreadable` says why, and the router answers the call with it.

To a peer on another host (:func:`mark_viewable`), the large frames that the receiver keeps
as views (arrays and tensors; not ``bytes``, which are rebuilt as objects of their own) are
named by another prefix, ``b"\\0V" | count (u16) | count x frame index (u16)``. A transport
with receive sinks (the builtin socket one) then asks the router where those frames go, and
:func:`receive_sinks` answers with a reused, already touched segment of this process's pool:
a large message is received at the socket's speed instead of the speed at which the
kernel hands out fresh pages (about 1 GB/s on the development VM). The segment returns to
the pool when the arrays over it die, as above.

Header frames of tetrarch messages are pickles (they start with ``\\x80``), so the prefixes
are unambiguous.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import threading
import weakref
from collections import OrderedDict
from typing import Any

from ... import _config
from ..._errors import TetrarchError
from ..values import _cuda
from ._cma import buffer_address
from ._segments import FREE, HEADER, Segment, holding, lease_of, lend, new_lease, pool, tickets

__all__ = ["MARK", "VIEW_MARK", "Unreadable", "abandon", "forget", "incoming", "mark_viewable", "outgoing",
           "payload_origin", "prepare", "receive_sinks"]

MARK = b"\0S"
VIEW_MARK = b"\0V"
_COUNT = struct.Struct("<H")
_INDEX = struct.Struct("<H")
#: A frame the receiver keeps as a view is received into the pool from this size on.
_POOL_MIN = 1 << 20
_ENTRY = struct.Struct("<HBiiQ16sQQiQI")
_COPIED, _SHARED, _FORWARDED = 1, 2, 3
_ALIGN = 64
#: Out-of-band frames smaller than this are not worth a place in a segment.
_FRAME_MIN = 1 << 14
#: Mappings of other processes' segments kept for reuse (least recently used beyond it are dropped).
_CACHE_ENTRIES = 64

def _copy(dst_addr: int, src: Any, nbytes: int) -> None:
    """Copy ``nbytes`` of buffer ``src`` to ``dst_addr`` (``ctypes.memmove`` releases the GIL)."""
    with buffer_address(src, writable=False) as (addr, n):
        ctypes.memmove(dst_addr, addr, min(n, nbytes))


class Unreadable(TetrarchError):
    """A message's payload was in shared memory this process could not map; ``header``: the message's header."""

    header: Any = b""


def _nbytes(frame: Any) -> int:
    if type(frame) is memoryview:
        return frame.nbytes
    if type(frame) is bytes:
        return len(frame)
    with memoryview(frame) as view:
        return view.nbytes


def _viewable(frame: Any) -> bool:
    """Whether the receiver keeps ``frame`` as a view (arrays, tensors, memoryviews) rather than copying it out.

    ``bytes`` and ``bytearray`` values are rebuilt as objects of their own, so shared memory
    would only add a copy; the socket receives them straight into the final object.
    """
    obj = frame.obj if type(frame) is memoryview else frame
    return type(obj) is not bytes and type(obj) is not bytearray


def _shared_origin(frame: Any) -> tuple[int, int, int] | None:
    """``(fd, offset, nbytes)`` when ``frame`` views a torch storage in shared memory (see ``_serial``)."""
    obj = frame.obj if type(frame) is memoryview else None
    if type(obj) is memoryview:
        obj = obj.obj
    return getattr(obj, "_tetrarch_shared", None)


def _by_reference(frame: Any, n: int, received: bool) -> tuple[int, Any, int] | None:
    """``(kind, what keeps it, file offset)`` when ``frame`` can go by reference: it views a torch
    tensor's shared file (``_SHARED``), or memory this process received through shared memory
    and still holds (a pooled segment, ``_FORWARDED``; a shared file, ``_SHARED``), unless not ``received``."""
    shared = _shared_origin(frame)
    if shared is not None:
        return _SHARED, shared, -1
    if not received or not holding():
        return None
    try:
        with buffer_address(frame, writable=False) as (addr, _):
            lease = lease_of(addr, n)
            if lease is None:
                return None
            return (_FORWARDED if lease.locked else _SHARED), lease, addr - lease.base
    except (BufferError, TypeError):
        return None


def outgoing(frames: list, peer_pid: int, by_reference: bool = True) -> list:
    """``frames`` with their large buffers moved to shared memory for ``peer_pid``, or ``frames`` as they are.

    Buffers that already live in shared memory go by reference: a shared tensor's file, and
    arrays this process received through shared memory (passed on without a copy: the
    receiver takes its own hold on them before this process lets go).

    Never raises: when no segment is to be had the message goes as it is (warned once).
    """
    if len(frames) <= 2 or not _config.SHM_PAYLOADS():
        return frames
    big: list[tuple[int, int, Any]] = []
    total = 0
    for i in range(2, len(frames)):
        n = _nbytes(frames[i])
        if n >= _FRAME_MIN and _viewable(frames[i]):
            ref = _by_reference(frames[i], n, by_reference)
            big.append((i, n, ref))
            if ref is None:
                total += n
    if not big or (total < _config.SHM_MIN_BYTES() and all(r is None for _, _, r in big)):
        return frames
    pid = os.getpid()
    entries = []
    seg: Segment | None = None
    if total >= _config.SHM_MIN_BYTES():
        seg = pool().take(sum(-(-n // _ALIGN) * _ALIGN for _, n, r in big if r is None), peer_pid)
    out = list(frames)
    offset = 0
    base = 0
    taken: list[int] = []
    if seg is not None:
        base = ctypes.addressof(ctypes.c_char.from_buffer(seg.mm, HEADER))
    try:
        for i, n, ref in big:
            if ref is not None:
                kind, keep, at = ref
                ticket = tickets().take(frames[i] if at < 0 else keep, peer_pid)
                if ticket is None:
                    continue
                table, slot = ticket
                taken.append(slot)
                if at < 0:  # a torch tensor's shared file: (fd, offset, nbytes)
                    fd, off, length = keep
                    inode = os.fstat(fd).st_ino
                else:  # a lease of what this process received
                    fd, off, length, inode = keep.fd, at, n, keep.inode
                entries.append(_ENTRY.pack(i, kind, pid, fd, inode, table.token, off, length,
                                           table.fd, table.inode, slot))
            elif seg is not None:
                _copy(base + offset, frames[i], n)
                entries.append(_ENTRY.pack(i, _COPIED, pid, seg.fd, seg.inode, seg.token, offset, n, 0, 0, 0))
                offset += -(-n // _ALIGN) * _ALIGN
            else:
                continue
            out[i] = b""
    except BaseException:
        if seg is not None:
            pool().give_back(seg)
        for slot in taken:
            tickets().give_back(slot)
        raise
    if not entries:
        return frames
    out[0] = b"".join([MARK, _COUNT.pack(len(entries)), *entries, bytes(memoryview(frames[0]))])
    return out


def prepare(frames: list, peer: Any, me: Any, sinks: bool, by_reference: bool = True) -> list:
    """``frames`` as they go to ``peer`` from ``me`` (both :class:`~tetrarch._transport._auth.PeerInfo`):
    CUDA tensors resolved for it (:func:`~.._cuda.resolve`: by IPC handle where it can open them),
    then through shared memory when it has this process's ``host_key`` (received payloads passed on
    by reference unless not ``by_reference``), else with their large frames named for its receive
    sinks (when the connection has them: ``sinks``).

    Raises:
        RuntimeError: torch failed to copy a CUDA tensor to host memory.
    """
    same_host = bool(peer.host_key) and peer.host_key == me.host_key
    if _cuda.has_pending(frames):
        stage = _stage_cuda if same_host and _config.SHM_PAYLOADS() else None
        frames = _cuda.resolve(frames, me.gpus, peer.gpus if same_host else None, stage)
    given = frames
    if same_host:
        frames = outgoing(frames, peer.pid, by_reference)
    if frames is given and sinks:
        frames = mark_viewable(frames)
    return frames


def _stage_cuda(pending: Any) -> memoryview | None:
    """A CUDA tensor's bytes copied from the GPU straight into a segment of the pool registered with CUDA
    (so the copy runs at the bus's speed), held by this process like a received payload: the message then
    names it by reference (``_FORWARDED``) and no host copy follows. None when no segment is to be had or
    CUDA refuses to register one (the caller stages through pinned memory instead).

    Raises:
        RuntimeError: torch failed the copy.
    """
    n = pending.tensor.nbytes
    seg = pool().take(n, os.getpid())
    if seg is None:
        return None
    if not seg.register_with_cuda():
        pool().give_back(seg)
        return None
    view = lend(seg.mm, HEADER, n, _own_lease(seg))
    try:
        pending.copy_into(view)
    except BaseException:
        del view  # its lease lets go of the segment
        raise
    return view


def _own_lease(seg: Segment) -> Any:
    """This process's hold on its own segment for one message, through a description of its own (the lock
    the pool's owner side looks for is then this hold's)."""
    return new_lease(seg.mm, f"/proc/self/fd/{seg.fd}", seg.inode)


def mark_viewable(frames: list) -> list:
    """``frames`` with their large view-kept frames named on the header, for a receiver on another host."""
    if len(frames) <= 2:
        return frames
    picked = [i for i in range(2, len(frames)) if _nbytes(frames[i]) >= _POOL_MIN and _viewable(frames[i])]
    if not picked:
        return frames
    out = list(frames)
    out[0] = b"".join([VIEW_MARK, _COUNT.pack(len(picked)), *(_INDEX.pack(i) for i in picked),
                       bytes(memoryview(frames[0]))])
    return out


def _picked(head: Any) -> tuple[list[int], memoryview]:
    view = memoryview(head)
    (count,) = _COUNT.unpack_from(view, len(VIEW_MARK))
    at = len(VIEW_MARK) + _COUNT.size
    return [_INDEX.unpack_from(view, at + k * _INDEX.size)[0] for k in range(count)], view[at + count * _INDEX.size:]


def receive_sinks(lead: list, sizes: list[int]) -> list[memoryview | None] | None:
    """Buffers of this process's pool for the frames a ``VIEW_MARK`` header names (the router's sink resolver).

    One entry per frame after ``lead`` (None: the transport's own buffer); None when the
    header names none of them or the pool has no room. Never raises.
    """
    try:
        picked, _ = _picked(lead[0])
    except (struct.error, ValueError):
        return None
    first = len(lead)
    picked = [i for i in picked if first <= i < len(sizes)]
    if not picked:
        return None
    seg = pool().take(sum(-(-sizes[i] // _ALIGN) * _ALIGN for i in picked), os.getpid())
    if seg is None:
        return None
    lease = _own_lease(seg)
    out: list[memoryview | None] = [None] * (len(sizes) - first)
    at = HEADER
    for i in picked:
        out[i - first] = lend(seg.mm, at, sizes[i], lease)
        at += -(-sizes[i] // _ALIGN) * _ALIGN
    return out


def _entries(head: memoryview) -> tuple[list[tuple], memoryview]:
    (count,) = _COUNT.unpack_from(head, len(MARK))
    at = len(MARK) + _COUNT.size
    entries = [_ENTRY.unpack_from(head, at + k * _ENTRY.size) for k in range(count)]
    return entries, head[at + count * _ENTRY.size:]


def abandon(frames: list) -> None:
    """A message :func:`outgoing` prepared was never sent: its segment is FREE again."""
    head = frames[0]
    if type(head) is not bytes or not head.startswith(MARK):
        return
    entries, _ = _entries(memoryview(head))
    p = pool()
    for _, kind, pid, fd, inode, _, _, _, _, _, slot in entries:
        if pid != os.getpid():
            continue
        if kind in (_SHARED, _FORWARDED):
            tickets().give_back(slot)
        elif kind == _COPIED:
            for seg in list(p._segments):
                if seg.fd == fd and seg.inode == inode:
                    p.give_back(seg)


class _Maps:
    """Mappings of other processes' segments, by ``(pid, inode)``, least recently used first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: OrderedDict[tuple[int, int], mmap.mmap] = OrderedDict()

    def get(self, pid: int, fd: int, inode: int, token: bytes, end: int) -> mmap.mmap:
        """The mapping of ``pid``'s segment ``fd``.

        Raises:
            Unreadable: it cannot be opened, or it is not the segment the message names.
        """
        key = (pid, inode)
        with self._lock:
            mm = self._maps.get(key)
            if mm is not None and bytes(mm[0:16]) == token and len(mm) >= end:
                self._maps.move_to_end(key)
                return mm
        mm = _map(pid, fd, inode, end, token)
        with self._lock:
            self._maps[key] = mm
            self._maps.move_to_end(key)
            self._drop_retired()
        return mm

    def _drop_retired(self) -> None:
        for key, mm in list(self._maps.items()):
            try:
                gone = mm[64] == 2  # RETIRED: its owner closed it
            except ValueError:
                gone = True
            if gone:
                del self._maps[key]
        while len(self._maps) > _CACHE_ENTRIES:
            self._maps.popitem(last=False)

    def forget(self, pid: int) -> None:
        """Drop the cached mappings of ``pid``'s segments (views over them stay valid)."""
        with self._lock:
            for key in [k for k in self._maps if k[0] == pid]:
                del self._maps[key]

    def clear(self) -> None:
        with self._lock:
            self._maps.clear()


def _map(pid: int, fd: int, inode: int, end: int, token: bytes | None) -> mmap.mmap:
    """Map ``/proc/<pid>/fd/<fd>`` whole, checked to be the file ``inode`` of at least ``end`` bytes.

    Raises:
        Unreadable: it is gone, refused, or another file.
    """
    mm, mine = _open_mapped(pid, fd, inode, end)
    os.close(mine)
    if token is not None and bytes(mm[0:16]) != token:
        mm.close()
        raise Unreadable(f"the shared memory that process {pid} named is another segment now: the sender ended "
                         "or reused it before it was read")
    return mm


def _open_mapped(pid: int, fd: int, inode: int, end: int) -> tuple[mmap.mmap, int]:
    """:func:`_map` without the token check, with the description it opened (the caller closes it).

    Raises:
        Unreadable: as :func:`_map`.
    """
    try:
        mine = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise Unreadable(f"the payload was in shared memory of process {pid}, which this process cannot open "
                         f"({exc.strerror}): the sender ended before it was read, or its memory is not open to "
                         f"this process (set TETRARCH_SHM_PAYLOADS=0 to send payloads through the socket)") from None
    try:
        st = os.fstat(mine)
        if st.st_ino != inode or st.st_size < end:
            raise Unreadable(f"the shared memory that process {pid} named is gone (its descriptor {fd} is another "
                             "file now): the sender ended or dropped it before it was read")
        mm = mmap.mmap(mine, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException as exc:
        os.close(mine)
        if isinstance(exc, OSError):
            raise Unreadable(f"cannot map the shared memory of process {pid}: {exc}") from None
        raise
    return mm, mine


_maps = _Maps()


def forget(pid: int) -> None:
    """The connection to ``pid`` closed: let go of the mappings of its segments this process cached.

    Without it a receiver would keep a sender's dropped segments mapped (their memory
    alive) until its next message; arrays over them keep their own mapping.
    """
    _maps.forget(pid)
_shared_maps: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()  # other processes' shared tensors (diagnostics)
_held_maps: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()  # segments passed on to this process (diagnostics)


def incoming(frames: list) -> list:
    """``frames`` with the shared-memory frames :func:`outgoing` described replaced by views of that memory.

    Raises:
        Unreadable: the memory cannot be mapped; ``frames[0]`` is then the original header,
            so the caller can still answer the message.
    """
    head = frames[0]
    if head[:2] != MARK:
        if head[:2] == VIEW_MARK:
            frames = list(frames)
            frames[0] = _picked(head)[1]
        return frames
    view = memoryview(head)
    entries, header = _entries(view)
    out = list(frames)
    out[0] = header
    leases: dict[tuple[int, int], Any] = {}  # one mapping and lease per segment, for all its frames
    ends: dict[tuple[int, int], int] = {}
    for _, kind, pid, _, inode, _, offset, nbytes, _, _, _ in entries:
        if kind == _COPIED:
            ends[(pid, inode)] = max(ends.get((pid, inode), 0), HEADER + offset + nbytes)
    try:
        for i, kind, pid, fd, inode, token, offset, nbytes, tfd, tinode, slot in entries:
            if kind == _COPIED:
                lease = leases.get((pid, inode))
                if lease is None:
                    mm = _maps.get(pid, fd, inode, token, ends[(pid, inode)])
                    lease = leases[(pid, inode)] = new_lease(mm, f"/proc/{pid}/fd/{fd}", inode)
                out[i] = lend(lease.mm, HEADER + offset, nbytes, lease)
            elif kind in (_SHARED, _FORWARDED):
                mm, mine = _open_mapped(pid, fd, inode, offset + nbytes)
                held = new_lease(mm, inode=inode, pooled=kind == _FORWARDED, fd=mine)  # the lease keeps ``mine``
                if kind == _FORWARDED and not held.locked:
                    raise Unreadable(f"cannot hold the shared memory that process {pid} passed on (no lock on "
                                     "it could be taken here)")
                (_shared_maps if kind == _SHARED else _held_maps).add(mm)
                out[i] = lend(mm, offset, nbytes, held)
                table = _maps.get(pid, tfd, tinode, token, HEADER + slot + 1)
                table[HEADER + slot] = FREE  # held: the sender may let go
            else:
                raise Unreadable(f"unknown shared-memory frame kind {kind}")
    except Unreadable as exc:
        exc.header = header
        raise
    return out


def payload_origin(obj: Any) -> str:
    """Where the memory of a received array, tensor or buffer lives (tests, diagnostics).

    ``"shm"``: a segment of another process; ``"shared"``: another process's shared tensor;
    ``"pool"``: this process's own receive pool; ``"private"``: anything else.
    """
    base: Any = obj
    torch_storage = getattr(obj, "untyped_storage", None)
    if torch_storage is not None:
        return _torch_origin(obj)
    for _ in range(16):
        if base is None:
            break
        lease = getattr(base, "_tetrarch_lease", None)
        if lease is not None:
            return _lease_origin(lease)
        nxt = getattr(base, "base", None)
        if nxt is None and type(base) is memoryview:
            nxt = base.obj
        base = nxt
    return "private"


def _lease_origin(lease: Any) -> str:
    if isinstance(lease, mmap.mmap) or (lease.fd >= 0 and not lease.locked):
        return "shared"
    local = any(seg.mm is lease.mm for seg in list(pool()._segments))
    return "pool" if local else "shm"


def _torch_origin(t: Any) -> str:
    ptr = t.untyped_storage().data_ptr()
    for seg in list(pool()._segments):
        start = ctypes.addressof(ctypes.c_char.from_buffer(seg.mm))
        if start <= ptr < start + len(seg.mm):
            return "pool"
    with _maps._lock:
        maps = list(_maps._maps.values())
    for kind, group in (("shm", maps + list(_held_maps)), ("shared", list(_shared_maps))):
        for mm in group:
            try:
                start = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            except (TypeError, ValueError):
                continue
            if start <= ptr < start + len(mm):
                return kind
    return "shared" if t.is_shared() else "private"


def state_of(mm: mmap.mmap) -> int:
    """The state byte of a segment mapping (tests)."""
    return mm[64] if len(mm) > 64 else FREE
