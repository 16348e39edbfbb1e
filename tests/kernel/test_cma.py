"""Cross-memory attach (``tetrarch._runtime.plumbing._cma``) against a real second process.

The owner is a child interpreter that maps a buffer, fills it with a pattern and reports
its address over a pipe; it answers ``sum`` (a checksum of its buffer) and exits when its
stdin closes. Errors must name their cause: a dead owner, an unmapped range, the ptrace
policy refusing (a reader of another user; an owner that is not dumpable).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tetrarch._runtime.plumbing import _cma
from tetrarch._runtime.plumbing._cma import CmaError, cma_probe, vm_read, vm_read_many, vm_write, vm_write_many
from tetrarch.testing import scaled

pytestmark = [
    pytest.mark.transport_independent,  # two processes and process_vm_readv: no transport
    pytest.mark.timeout(scaled(60)),
    pytest.mark.skipif(not cma_probe()[0], reason=f"cross-memory attach unavailable: {cma_probe()[1]}"),
]

NOBODY = 65534

_OWNER = r"""
import ctypes, hashlib, mmap, os, sys
n, uid, dumpable = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
if uid >= 0:
    os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)   # changing uid also clears "dumpable"
if dumpable:
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)                       # PR_SET_DUMPABLE
pages = (n + 4095) // 4096 * 4096
m = mmap.mmap(-1, pages + 4096)
m.seek(0); m.write(bytes(i * 7 % 251 for i in range(n)))
c = (ctypes.c_char * (pages + 4096)).from_buffer(m)
base = ctypes.addressof(c)
libc = ctypes.CDLL(None)
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.munmap(base + pages, 4096)        # a hole right after the buffer's pages
print(base, flush=True)
for line in sys.stdin:
    print(hashlib.sha256(bytes(m[:n])).hexdigest(), flush=True)
"""

# A reader that drops to another user after importing (the venv may be unreadable to it).
_READER = r"""
import errno, os, sys
from tetrarch._runtime.plumbing._cma import CmaError, vm_read
pid, address, n, uid = (int(a) for a in sys.argv[1:5])
os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
try:
    vm_read(pid, address, bytearray(n))
except CmaError as e:
    print(errno.errorcode[e.errno], e)
else:
    print("ok")
"""


def pattern(n: int) -> bytes:
    return bytes(i * 7 % 251 for i in range(n))


class Owner:
    def __init__(self, n: int, uid: int = -1, dumpable: bool = False) -> None:
        self.n = n
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _OWNER, str(n), str(uid), "1" if dumpable else "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.address = int(self.proc.stdout.readline())
        self.pid = self.proc.pid

    def checksum(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("sum\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(scaled(10))
        finally:
            self.proc.kill()
            self.proc.wait()
            if self.proc.stdout:
                self.proc.stdout.close()


@pytest.fixture
def owner() -> Iterator[Owner]:
    o = Owner((1 << 20) + 7)
    yield o
    o.close()


def test_read_copies_the_owners_bytes(owner: Owner) -> None:
    dst = bytearray(owner.n)
    vm_read(owner.pid, owner.address, dst)
    assert dst == pattern(owner.n)
    part = memoryview(bytearray(100))
    vm_read(owner.pid, owner.address + 1000, part)
    assert part == pattern(1100)[1000:]


def test_write_lands_in_the_owner_and_accepts_read_only_sources(owner: Owner) -> None:
    data = os.urandom(owner.n)
    vm_write(owner.pid, owner.address, data)  # bytes: read-only, no copy of it is made
    assert owner.checksum() == hashlib.sha256(data).hexdigest()


def test_large_transfers_are_cut_into_pieces_and_batched(owner: Owner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of CHUNK bytes, at most IOV_MAX per call, several calls: every byte arrives."""
    monkeypatch.setattr(_cma, "CHUNK", 4093)
    monkeypatch.setattr(_cma, "IOV_MAX", 5)
    dst = bytearray(owner.n)
    vm_read(owner.pid, owner.address, dst)
    assert dst == pattern(owner.n)
    data = os.urandom(owner.n)
    vm_write(owner.pid, owner.address, data)
    assert owner.checksum() == hashlib.sha256(data).hexdigest()


def test_batches_of_several_ranges(owner: Owner) -> None:
    a, b, c = bytearray(10), bytearray(0), bytearray(5000)
    vm_read_many(owner.pid, [(owner.address + 3, a), (owner.address, b), (owner.address + 20000, c)])
    ref = pattern(owner.n)
    assert (bytes(a), bytes(c)) == (ref[3:13], ref[20000:25000])
    vm_write_many(owner.pid, [(owner.address, b"x" * 10), (owner.address + 100, b"y")])
    expect = bytearray(ref)
    expect[0:10], expect[100:101] = b"x" * 10, b"y"
    assert owner.checksum() == hashlib.sha256(expect).hexdigest()


def test_a_range_running_into_unmapped_memory_is_an_error_not_a_short_copy(owner: Owner) -> None:
    """The kernel moves what it can and returns a short count; the rest must raise EFAULT."""
    end = owner.address + (owner.n + 4095) // 4096 * 4096
    with pytest.raises(CmaError, match="not mapped") as info:
        vm_read(owner.pid, end - 4096, bytearray(8192))
    assert info.value.errno == errno.EFAULT
    with pytest.raises(CmaError, match="not mapped"):
        vm_write(owner.pid, end - 10, b"z" * 20)


def test_a_dead_owner_is_named() -> None:
    o = Owner(4096)
    pid, address = o.pid, o.address
    o.close()
    with pytest.raises(CmaError, match=f"owner process {pid} is gone") as info:
        vm_read(pid, address, bytearray(16))
    assert info.value.errno == errno.ESRCH


def test_local_buffers_must_be_writable_and_contiguous(owner: Owner) -> None:
    with pytest.raises(BufferError):
        vm_read(owner.pid, owner.address, b"read-only")
    with pytest.raises(BufferError):
        vm_write(owner.pid, owner.address, memoryview(bytearray(10))[::2])


def test_probe_says_yes_here() -> None:
    ok, reason = cma_probe()
    assert ok and "process_vm_readv" in reason


def _read_as(uid: int, o: Owner) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", _READER, str(o.pid), str(o.address), "64", str(uid)],
                         capture_output=True, text=True, env=env, timeout=scaled(30), check=True)
    return out.stdout.strip()


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing user needs root")


@needs_root
def test_a_reader_of_another_user_is_refused_by_ptrace_policy(owner: Owner) -> None:
    out = _read_as(NOBODY, owner)
    assert out.startswith("EPERM") and "ptrace policy" in out and "'tcp' RDMA backend" in out


@needs_root
def test_same_user_siblings_may_read_each_other() -> None:
    o = Owner(4096, uid=NOBODY, dumpable=True)
    try:
        assert _read_as(NOBODY, o) == "ok"
    finally:
        o.close()


@needs_root
def test_an_owner_that_is_not_dumpable_refuses_its_own_user() -> None:
    """A process that changed its credentials is not dumpable, which denies ptrace access."""
    o = Owner(4096, uid=NOBODY, dumpable=False)
    try:
        assert _read_as(NOBODY, o).startswith("EPERM")
    finally:
        o.close()


def test_buffer_address_is_the_address_ctypes_sees() -> None:
    buf = bytearray(b"abc")
    with _cma.buffer_address(buf, writable=True) as (address, n):
        assert (address, n) == (ctypes.addressof(ctypes.c_char.from_buffer(buf)), 3)
