"""RDMA read_into / write_from between two procs, per available backend, against a memcpy baseline.

Both sides are touched before timing (this VM's first-touch page faults run at well under
1 GB/s and would swamp both the transfer and the baseline): the owner's buffer is filled,
the local destination is written once, and each size runs ``--repeat`` times (best kept).

    python benchmarks/bench_rdma.py [--sizes 1,64,512] [--repeat 3] [--backends tcp,shm]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from tetrarch import Actor, endpoint, this_host
from tetrarch.plugins import BackendKind, Status, get_registry
from tetrarch.rdma import RDMABuffer

MiB = 1 << 20


class Owner(Actor):
    def __init__(self) -> None:
        self.memory: dict[int, np.ndarray] = {}

    @endpoint
    def make(self, nbytes: int, backend: str) -> RDMABuffer:
        self.memory[nbytes] = np.ones(nbytes, dtype=np.uint8)  # touched
        return RDMABuffer(self.memory[nbytes], backend=backend)


def memcpy_gbps(nbytes: int, repeat: int) -> float:
    src, dst = np.ones(nbytes, dtype=np.uint8), np.zeros(nbytes, dtype=np.uint8)
    np.copyto(dst, src)  # both touched
    best = min(_copy_time(dst, src) for _ in range(repeat))
    return nbytes / best / 1e9


def _copy_time(dst: np.ndarray, src: np.ndarray) -> float:
    start = time.perf_counter()
    np.copyto(dst, src)
    return time.perf_counter() - start


def _timed(op: Any, local: np.ndarray) -> float:
    start = time.perf_counter()
    op(local, timeout=300).get()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,64,512", help="MiB, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", default="", help="default: every available RDMA backend")
    args = parser.parse_args()
    available = [r.name for r in get_registry().statuses(BackendKind.RDMA) if r.status is Status.AVAILABLE]
    backends = [b for b in args.backends.split(",") if b] or available
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("owner", Owner)
    print(f"{'backend':8} {'op':10} {'size':>8} {'GB/s':>7} {'memcpy GB/s':>12} {'ratio':>6}")
    for size in (int(s) for s in args.sizes.split(",")):
        nbytes = size * MiB
        base = memcpy_gbps(nbytes, args.repeat)
        local = np.ones(nbytes, dtype=np.uint8)  # touched
        for backend in backends:
            buf = owner.make.call_one(nbytes, backend).get()
            for op in ("read_into", "write_from"):
                run = getattr(buf, op)
                best = min(_timed(run, local) for _ in range(args.repeat))
                gbps = nbytes / best / 1e9
                print(f"{backend:8} {op:10} {size:>5}MiB {gbps:7.2f} {base:12.2f} {gbps / base:6.2f}")
            buf.drop().get()
    procs.stop().get()


if __name__ == "__main__":
    main()
