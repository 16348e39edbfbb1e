"""RDMA into and out of GPU memory: a remote CPU buffer read into / written from a CUDA tensor.

Core's ``tcp`` and ``shm`` backends move host memory only, so device memory goes through
pinned host memory (``tetrarch._rdma._staging``). The baseline, measured in the same run,
is the same bytes as a pinned host -> device copy (``cudaMemcpy`` through torch) plus the
host-memory transfer alone: the staged transfer can at best cost their sum.

    python benchmarks/bench_rdma_cuda.py [--sizes 1,64,512] [--repeat 3] [--backends tcp,shm]

Needs torch with a CUDA (or ROCm) device; prints why not otherwise.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench_rdma import Owner

from tetrarch import this_host

MiB = 1 << 20


def _best(fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,64,512", help="MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default="tcp,shm")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(f"no CUDA/ROCm device: torch {torch.__version__} (cuda {torch.version.cuda}, hip {torch.version.hip})")
        return
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    pm = this_host().spawn_procs(per_host={"procs": 1})
    owner = pm.spawn("owner", Owner)
    print(f"{'backend':8}{'MiB':>6}{'H2D pinned GB/s':>17}{'host read GB/s':>16}{'read->cuda GB/s':>17}"
          f"{'write<-cuda GB/s':>18}{'read vs sum':>13}")
    for backend in args.backends.split(","):
        for mib in (int(s) for s in args.sizes.split(",")):
            nbytes = mib * MiB
            buf = owner.make.call_one(nbytes, backend).get(timeout=120)
            host = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
            dev = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
            h2d = _best(lambda d=dev, h=host: (d.copy_(h), torch.cuda.synchronize()), args.repeat)
            plain = _best(lambda b=buf, h=host: b.read_into(h, timeout=300).get(), args.repeat)
            read = _best(lambda b=buf, d=dev: b.read_into(d, timeout=300).get(), args.repeat)
            write = _best(lambda b=buf, d=dev: b.write_from(d, timeout=300).get(), args.repeat)
            gbps = [nbytes / t / 1e9 for t in (h2d, plain, read, write)]
            print(f"{backend:8}{mib:>6}{gbps[0]:>17.2f}{gbps[1]:>16.2f}{gbps[2]:>17.2f}{gbps[3]:>18.2f}"
                  f"{(h2d + plain) / read:>13.2f}")
            buf.drop().get(timeout=60)
    pm.stop().get(timeout=60)


if __name__ == "__main__":
    main()
