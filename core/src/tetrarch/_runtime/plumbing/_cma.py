"""Cross-memory attach: copy between this process and another one on the same host.

``process_vm_readv`` / ``process_vm_writev`` (Linux >= 3.2) copy straight between two
address spaces: one copy, no socket, no shared mapping. This is what UCX's ``cma``
transport and Open MPI's shared-memory BTL use inside a node.

The kernel allows it when the caller may ptrace the other process
(``PTRACE_MODE_ATTACH_REALCREDS``): same real/effective/saved uid and gid, the target is
dumpable, and the Yama LSM, where present, agrees (``ptrace_scope`` 0; at 1 the target
must be a descendant or have named us with ``prctl(PR_SET_PTRACER)``; at 2 only
``CAP_SYS_PTRACE``; at 3 never). A container's seccomp profile may refuse the syscalls
altogether (``EPERM`` or ``ENOSYS``).

The calls go through ``ctypes``, which releases the GIL for the duration of each call.
Transfers are split into pieces below the kernel's per-call limit (``MAX_RW_COUNT``,
about 2 GiB, past which it silently moves less) and batched up to ``IOV_MAX`` pieces per
call; a call that moves less than asked (it stops at the first piece it cannot access)
is continued from where it stopped, so a short count is never mistaken for success.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from ..._errors import TetrarchError

__all__ = [
    "CHUNK",
    "IOV_MAX",
    "CmaError",
    "buffer_address",
    "cma_probe",
    "vm_read",
    "vm_read_many",
    "vm_write",
    "vm_write_many",
]

#: Largest piece one iovec carries (well under the kernel's ~2 GiB per-call cap).
CHUNK = 1 << 30
#: Most iovecs per call (Linux's UIO_MAXIOV).
IOV_MAX = 1024


class CmaError(TetrarchError, OSError):
    """A cross-memory copy failed; ``errno`` is the kernel's, the message says why and what to do."""


class _IOVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _PyBuffer(ctypes.Structure):  # Py_buffer, from CPython's stable buffer API
    _fields_ = [
        ("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p),
    ]


_PyBUF_WRITABLE = 0x0001
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None

_libc = ctypes.CDLL(None, use_errno=True)
_SIG = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_ulong, ctypes.POINTER(_IOVec), ctypes.c_ulong,
        ctypes.c_ulong]
_readv = getattr(_libc, "process_vm_readv", None)
_writev = getattr(_libc, "process_vm_writev", None)
for _fn in (_readv, _writev):
    if _fn is not None:
        _fn.argtypes = _SIG
        _fn.restype = ctypes.c_ssize_t


@contextmanager
def buffer_address(obj: object, *, writable: bool) -> Iterator[tuple[int, int]]:
    """``(address, nbytes)`` of a C-contiguous buffer, held exported (so it cannot move) inside the block.

    Works for read-only buffers too (``bytes``), which ``ctypes.from_buffer`` refuses.

    Raises:
        BufferError: ``obj`` is not C-contiguous, or ``writable`` and it is read-only.
        TypeError: ``obj`` does not support the buffer protocol.
    """
    view = _PyBuffer()
    flags = _PyBUF_WRITABLE if writable else 0  # PyBUF_SIMPLE: contiguous bytes or an error
    _get_buffer(obj, ctypes.byref(view), flags)  # ctypes raises the Python error it set
    try:
        yield (view.buf or 0), view.len
    finally:
        _release_buffer(ctypes.byref(view))


def _explain(err: int, pid: int, what: str) -> str:
    if err == errno.EPERM:
        return (f"the kernel refused cross-memory attach to pid {pid} (EPERM): its ptrace policy does not let "
                "this process access that one (different user, an owner that is not dumpable, Yama "
                "ptrace_scope >= 2 without CAP_SYS_PTRACE, or a seccomp profile); run both processes as the "
                "same user, or use the 'tcp' RDMA backend (TETRARCH_RDMA_BACKEND=tcp)")
    if err == errno.ESRCH:
        return f"the owner process {pid} is gone (ESRCH): it exited or was killed"
    if err == errno.EFAULT:
        return (f"{what} of pid {pid} is not mapped (EFAULT): the buffer was freed, or the address range is "
                "outside the owner's memory")
    if err == errno.ENOSYS:
        return ("this kernel or its seccomp profile does not provide process_vm_readv/process_vm_writev "
                "(ENOSYS); use the 'tcp' RDMA backend (TETRARCH_RDMA_BACKEND=tcp)")
    if err == errno.ENOMEM:
        return f"the kernel could not allocate memory for a cross-memory copy with pid {pid} (ENOMEM)"
    return f"cross-memory copy with pid {pid} failed: {os.strerror(err)} (errno {err})"


def _pieces(pairs: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``(remote, local, n)`` triples cut so that no piece exceeds ``CHUNK``."""
    out = []
    for remote, local, n in pairs:
        for off in range(0, n, CHUNK):
            out.append((remote + off, local + off, min(CHUNK, n - off)))
    return out


def _transfer(pid: int, pairs: Sequence[tuple[int, int, int]], *, write: bool) -> None:
    fn = _writev if write else _readv
    what = "the destination range" if write else "the source range"
    if fn is None:
        raise CmaError(errno.ENOSYS, _explain(errno.ENOSYS, pid, what))
    pieces = [p for p in _pieces(pairs) if p[2]]
    i = 0
    while i < len(pieces):
        batch: list[tuple[int, int, int]] = []
        total = 0
        while i + len(batch) < len(pieces) and len(batch) < IOV_MAX and total < CHUNK:
            batch.append(pieces[i + len(batch)])
            total += batch[-1][2]
        local = (_IOVec * len(batch))(*[_IOVec(lo, n) for _r, lo, n in batch])
        remote = (_IOVec * len(batch))(*[_IOVec(r, n) for r, _lo, n in batch])
        moved = fn(pid, local, len(batch), remote, len(batch), 0)
        if moved < 0:
            err = ctypes.get_errno()
            raise CmaError(err, _explain(err, pid, what))
        if moved == 0:  # no progress and no error: treat as an unmapped range rather than spin
            raise CmaError(errno.EFAULT, _explain(errno.EFAULT, pid, what))
        # Advance past what moved; a piece cut in the middle is continued next round.
        while moved:
            remote_addr, local_addr, n = pieces[i]
            if moved >= n:
                moved -= n
                i += 1
            else:
                pieces[i] = (remote_addr + moved, local_addr + moved, n - moved)
                moved = 0


def _many(pid: int, transfers: Sequence[tuple[int, object]], *, write: bool) -> None:
    with ExitStack() as stack:
        pairs = []
        for remote, local in transfers:
            address, n = stack.enter_context(buffer_address(local, writable=not write))
            pairs.append((remote, address, n))
        _transfer(pid, pairs, write=write)


def vm_read(pid: int, remote_addr: int, local: object) -> None:
    """Fill the writable buffer ``local`` with ``len`` bytes read at ``remote_addr`` in process ``pid``.

    Raises:
        CmaError: the kernel refused (``EPERM``: ptrace policy), the owner is gone
            (``ESRCH``), or the remote range is not mapped (``EFAULT``); the message says which.
        BufferError: ``local`` is read-only or not contiguous.
    """
    _many(pid, [(remote_addr, local)], write=False)


def vm_write(pid: int, remote_addr: int, local: object) -> None:
    """Copy the buffer ``local`` to ``remote_addr`` in process ``pid``.

    Raises:
        CmaError: as :func:`vm_read`.
        BufferError: ``local`` is not contiguous.
    """
    _many(pid, [(remote_addr, local)], write=True)


def vm_read_many(pid: int, transfers: Sequence[tuple[int, object]]) -> None:
    """Several :func:`vm_read` of the same process in as few system calls as possible.

    Raises:
        CmaError, BufferError: as :func:`vm_read`.
    """
    _many(pid, transfers, write=False)


def vm_write_many(pid: int, transfers: Sequence[tuple[int, object]]) -> None:
    """Several :func:`vm_write` to the same process in as few system calls as possible.

    Raises:
        CmaError, BufferError: as :func:`vm_write`.
    """
    _many(pid, transfers, write=True)


def cma_probe() -> tuple[bool, str]:
    """Whether cross-memory attach can work here, and why not: ``(ok, reason)``. Never raises.

    Fast and side-effect free: reads Yama's ``ptrace_scope`` and copies 8 bytes of this
    process's own memory with ``process_vm_readv`` (which a seccomp filter or a kernel
    without CMA refuses). It cannot prove that a particular other process lets us in
    (its user and dumpability decide); transfers report that with a clear ``CmaError``.
    """
    try:
        if _readv is None:
            return False, "the C library has no process_vm_readv"
        try:
            with open("/proc/sys/kernel/yama/ptrace_scope") as f:
                scope = int(f.read().strip() or 0)
        except (OSError, ValueError):
            scope = 0  # no Yama: the classic same-uid rule
        if scope >= 3:
            return False, "Yama ptrace_scope is 3 (no process may attach to another)"
        if scope == 2 and not _has_cap_sys_ptrace():
            return False, "Yama ptrace_scope is 2 and this process lacks CAP_SYS_PTRACE"
        src = ctypes.c_uint64(0x7465747261726368)
        dst = ctypes.c_uint64(0)
        local = _IOVec(ctypes.addressof(dst), 8)
        remote = _IOVec(ctypes.addressof(src), 8)
        moved = _readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if moved != 8 or dst.value != src.value:
            err = ctypes.get_errno()
            return False, f"process_vm_readv of our own memory failed: {os.strerror(err)} (errno {err})"
        detail = "cross-memory attach (process_vm_readv)"
        return True, detail + (" with Yama ptrace_scope 1: owners opt in with PR_SET_PTRACER" if scope == 1 else "")
    except Exception as exc:  # noqa: BLE001 - a probe never raises
        return False, f"probing process_vm_readv raised {exc!r}"


def _has_cap_sys_ptrace() -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) & (1 << 19))  # CAP_SYS_PTRACE = 19
    except (OSError, ValueError):
        pass
    return False
