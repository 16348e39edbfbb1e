"""Same-host copy mechanisms for the ``shm`` RDMA backend, next to memcpy, in one run.

    python benchmarks/bench_shm_mechanisms.py [--mib 1 64 512] [--repeat 5]

An owner process (a child) holds a buffer; this process, the reader, copies it into a
destination it already touched (read) and back (write). Every buffer on both sides is
touched before timing, so the VM's slow first-touch page faults (0.3-0.7 GB/s here) are in
neither the mechanisms nor the memcpy they are compared with.

* ``memcpy``: ``ctypes.memmove`` between two touched buffers of this process (the baseline).
* ``cma``: ``process_vm_readv`` / ``process_vm_writev`` against the owner's private memory
  (``tetrarch._rdma._cma``), one thread, and split in two halves on two threads.
* ``shm mapped``: the owner's buffer lives in a ``/dev/shm`` file that the reader has
  already mapped and touched: the copy is a plain memcpy from/to the shared mapping
  (what a cached mapping costs per transfer).
* ``shm map+copy``: the reader maps the file for this transfer (``MAP_POPULATE``), copies,
  unmaps: what a transfer costs when the mapping is not cached.

Each line prints the best time of ``--repeat`` runs, GB/s (10^9 bytes/s) and the ratio to
memcpy of the same size.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable

from _timing import timed

from tetrarch._runtime.plumbing._cma import buffer_address, vm_read, vm_write

_OWNER = r"""
import ctypes, mmap, os, sys
n, path = int(sys.argv[1]), sys.argv[2]
if path == "-":
    buf = mmap.mmap(-1, n)
else:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, n)
    buf = mmap.mmap(fd, n)
    os.close(fd)
c = (ctypes.c_char * n).from_buffer(buf)
ctypes.memset(c, 7, n)                      # touch every page
print(ctypes.addressof(c), flush=True)
sys.stdin.read()                             # until the reader closes our stdin
"""


class Owner:
    """A child process holding ``n`` touched bytes, in anonymous memory or in a /dev/shm file."""

    def __init__(self, n: int, shm_path: str | None = None) -> None:
        self.path = shm_path
        self.proc = subprocess.Popen([sys.executable, "-c", _OWNER, str(n), shm_path or "-"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.address = int(self.proc.stdout.readline())
        self.pid = self.proc.pid

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        if self.path:
            os.unlink(self.path)


def touched(n: int) -> mmap.mmap:
    buf = mmap.mmap(-1, n)
    ctypes.memset((ctypes.c_char * n).from_buffer(buf), 1, n)
    return buf


def best(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up (also faults in anything lazily mapped)
    return min(timed(fn, repeat))


def split2(fn: Callable[[int, memoryview], None], address: int, local: memoryview) -> None:
    half = (len(local) // 2) & ~4095
    t = threading.Thread(target=fn, args=(address + half, local[half:]))
    t.start()
    fn(address, local[:half])
    t.join()


def run(n: int, repeat: int) -> list[tuple[str, float]]:
    rows: list[tuple[str, float]] = []
    a, b = touched(n), touched(n)
    with buffer_address(a, writable=True) as (pa, _), buffer_address(b, writable=True) as (pb, _):
        rows.append(("memcpy (touched -> touched)", best(lambda: ctypes.memmove(pb, pa, n), repeat)))
    dst = memoryview(b)
    owner = Owner(n)
    try:
        pid, addr = owner.pid, owner.address
        rows.append(("cma read (process_vm_readv)", best(lambda: vm_read(pid, addr, dst), repeat)))
        rows.append(("cma write (process_vm_writev)", best(lambda: vm_write(pid, addr, dst), repeat)))
        rows.append(("cma read, 2 threads", best(
            lambda: split2(lambda ad, mv: vm_read(pid, ad, mv), addr, dst), repeat)))
        rows.append(("cma write, 2 threads", best(
            lambda: split2(lambda ad, mv: vm_write(pid, ad, mv), addr, dst), repeat)))
    finally:
        owner.close()
    path = f"/dev/shm/tetrarch-bench-{uuid.uuid4().hex}"
    owner = Owner(n, path)
    try:
        fd = os.open(path, os.O_RDWR)
        try:
            shared = mmap.mmap(fd, n)
            with buffer_address(shared, writable=True) as (ps, _), buffer_address(b, writable=True) as (pb, _):
                ctypes.memmove(pb, ps, n)  # touch the mapping in the reader
                rows.append(("shm mapped read (memcpy)", best(lambda: ctypes.memmove(pb, ps, n), repeat)))
                rows.append(("shm mapped write (memcpy)", best(lambda: ctypes.memmove(ps, pb, n), repeat)))
            shared.close()

            def map_copy() -> None:
                m = mmap.mmap(fd, n, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
                with buffer_address(m, writable=True) as (pm, _), buffer_address(b, writable=True) as (pb, _):
                    ctypes.memmove(pb, pm, n)
                m.close()

            rows.append(("shm map+copy+unmap read", best(map_copy, repeat)))
        finally:
            os.close(fd)
    finally:
        owner.close()
    dst.release()
    a.close()
    b.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[1, 64, 512])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, kernel {os.uname().release}, best of {args.repeat}")
    for mib in args.mib:
        n = mib << 20
        rows = run(n, args.repeat if mib >= 64 else args.repeat * 10)
        base = rows[0][1]
        print(f"\n{mib} MiB")
        for name, t in rows:
            print(f"  {name:32s} {t * 1e3:9.3f} ms  {n / t / 1e9:6.2f} GB/s  {base / t:5.2f} x memcpy")


if __name__ == "__main__":
    main()
