"""RDMA read_into / write_from between two procs, per available backend, against a memcpy baseline.

Both sides are touched before timing (this VM's first-touch page faults run at well under
1 GB/s and would swamp both the transfer and the baseline): the owner's buffer is filled,
the local destination is written once, and each buffer is transferred once untimed (warm:
connections, confirmations, registrations) before ``--repeat`` timed runs (best kept). The
memcpy baseline is measured in the same run, per size. Rows ``efa[shm]`` and
``efa[tcp;ofi_rxm]`` run the efa backend over libfabric's software providers (owner procs
spawned with ``configure(efa_provider=...)``; ``efa[shm]`` with the unchecked-access opt-in).
``lat4k`` is the p50 of 4 KiB reads.

    python benchmarks/bench_rdma.py [--sizes 1,64,512] [--repeat 3] [--backends tcp,shm]
                                    [--efa-providers shm,tcp;ofi_rxm] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from tetrarch import Actor, configured, endpoint, this_host
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


def _efa_providers(wanted: str) -> list[str]:
    """The providers of ``wanted`` the installed libfabric offers with RMA (none without the plugin)."""
    try:
        from tetrarch_rdma_efa._discover import discover
    except ImportError:
        return []
    found = discover()
    return [] if found.error else [p for p in wanted.split(",") if p and p in found.rma]


@contextlib.contextmanager
def _owner(provider: str | None) -> Iterator[Any]:
    """An Owner in a fresh proc (spawned with ``efa_provider=provider`` when given).

    efa over ``shm`` registers memory only with ``efa_allow_unchecked_access`` (that provider
    can't check a reader on the owner's side: docs/rdma.md); the benchmark opts in for its row.
    """
    settings = {"efa_provider": provider, "efa_allow_unchecked_access": provider == "shm"} if provider else {}
    with configured(**settings) if settings else contextlib.nullcontext():
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        try:
            yield procs.spawn("owner", Owner)
        finally:
            procs.stop().get()


def _row(label: str, backend: str, provider: str | None, sizes: list[int], repeat: int, lat_n: int,
         bases: dict[int, float]) -> None:
    with _owner(provider) as owner:
        for size in sizes:
            nbytes = size * MiB
            local = np.ones(nbytes, dtype=np.uint8)  # touched
            buf = owner.make.call_one(nbytes, backend).get()
            for op in ("read_into", "write_from"):
                run = getattr(buf, op)
                _timed(run, local)  # warm
                best = min(_timed(run, local) for _ in range(repeat))
                gbps = nbytes / best / 1e9
                base = bases[size]
                print(f"{label:17} {op:10} {size:>5}MiB {gbps:7.2f} {base:12.2f} {gbps / base:6.2f}", flush=True)
            buf.drop().get()
        small = owner.make.call_one(4096, backend).get()
        dst = np.zeros(4096, dtype=np.uint8)
        _timed(small.read_into, dst)  # warm
        p50 = statistics.median(_timed(small.read_into, dst) for _ in range(lat_n))
        print(f"{label:17} {'lat4k p50':10} {'4KiB':>8} {p50 * 1e6:7.0f} us", flush=True)
        small.drop().get()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,64,512", help="MiB, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", default="", help="default: every available RDMA backend")
    parser.add_argument("--efa-providers", default="shm,tcp;ofi_rxm",
                        help="libfabric providers to run the efa backend over ('' for none)")
    parser.add_argument("--quick", action="store_true", help="--repeat 1 and 50 latency samples (not 200)")
    args = parser.parse_args()
    repeat, lat_n = (1, 50) if args.quick else (args.repeat, 200)
    available = [r.name for r in get_registry().statuses(BackendKind.RDMA) if r.status is Status.AVAILABLE]
    backends = [b for b in args.backends.split(",") if b] or available
    rows: list[tuple[str, str, str | None]] = [(b, b, None) for b in backends if b != "efa"]
    rows += [(f"efa[{p}]", "efa", p) for p in _efa_providers(args.efa_providers)]
    sizes = [int(s) for s in args.sizes.split(",")]
    bases = {size: memcpy_gbps(size * MiB, max(repeat, 2)) for size in sizes}
    print(f"{'backend':17} {'op':10} {'size':>8} {'GB/s':>7} {'memcpy GB/s':>12} {'ratio':>6}")
    for label, backend, provider in rows:
        _row(label, backend, provider, sizes, repeat, lat_n, bases)


if __name__ == "__main__":
    main()
