"""RDMABuffer ``read_into`` / ``write_from`` between two procs, next to memcpy, in one run.

    python benchmarks/bench_rdma_shm.py [--backend shm] [--mib 1 64 512] [--repeat 5]

A server actor in one proc owns a touched buffer and hands out an ``RDMABuffer`` of it; a
client actor in another proc reads it into, and writes it from, a destination it already
touched. The memcpy baseline copies between two touched buffers in the client's proc. No
side pays first-touch page faults (slow on this VM), so the ratio is the mechanism's.
Prints the best of ``--repeat`` transfers, GB/s (10^9 bytes/s) and the ratio to memcpy.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
from collections.abc import Callable

from _timing import timed

from tetrarch import Actor, endpoint, this_host
from tetrarch.rdma import RDMABuffer


def touched(n: int) -> mmap.mmap:
    buf = mmap.mmap(-1, n)
    ctypes.memset((ctypes.c_char * n).from_buffer(buf), 1, n)
    return buf


class Server(Actor):
    def __init__(self, n: int) -> None:
        self.data = touched(n)

    @endpoint
    def buffer(self, backend: str) -> RDMABuffer:
        return RDMABuffer(memoryview(self.data), backend=backend)


class Client(Actor):
    @endpoint
    def run(self, buf: RDMABuffer, n: int, repeat: int) -> list[tuple[str, float]]:
        a, b = touched(n), touched(n)
        pa = ctypes.addressof(ctypes.c_char.from_buffer(a))
        pb = ctypes.addressof(ctypes.c_char.from_buffer(b))
        dst = memoryview(b)

        def best(fn: Callable[[], object]) -> float:
            fn()
            return min(timed(fn, repeat))

        return [("memcpy (touched -> touched)", best(lambda: ctypes.memmove(pb, pa, n))),
                ("read_into", best(lambda: buf.read_into(dst, timeout=120).get())),
                ("write_from", best(lambda: buf.write_from(dst, timeout=120).get()))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="shm")
    parser.add_argument("--mib", type=int, nargs="+", default=[1, 64, 512])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    procs = this_host().spawn_procs(per_host={"procs": 2})
    try:
        for mib in args.mib:
            n = mib << 20
            server = procs.slice(procs=0).spawn(f"server{mib}", Server, n)
            client = procs.slice(procs=1).spawn(f"client{mib}", Client)
            buf = server.buffer.call_one(args.backend).get()
            repeat = args.repeat if mib >= 64 else args.repeat * 10
            rows = client.run.call_one(buf, n, repeat).get()
            base = rows[0][1]
            print(f"\n{mib} MiB, backend {buf.backend}")
            for name, t in rows:
                print(f"  {name:28s} {t * 1e3:9.3f} ms  {n / t / 1e9:6.2f} GB/s  {base / t:5.2f} x memcpy")
    finally:
        procs.stop().get()


if __name__ == "__main__":
    main()
