"""CUDA tensors as endpoint arguments and results, next to the GPU's own copies (issue 31, GPU part).

    python benchmarks/bench_cuda_payload.py [--mib 64,1024] [--repeat 5] [--json]

Needs a GPU; without one it says so and exits 0. One proc on this host sees GPU 0
(``spawn_procs(per_host={"gpus": 1})``), the client puts its tensors on GPU 0 too. Two
paths, each in a fresh client (its procs inherit the setting):

* ``ipc``: ``TETRARCH_CUDA_IPC=1`` (the default): the tensor's CUDA IPC handle travels, the
  receiver maps the sender's memory;
* ``host``: ``TETRARCH_CUDA_IPC=0``: device -> pinned host memory -> shared memory (same
  host) -> the receiver's GPU.

Rows: ``argument`` (the client calls an endpoint that reads the tensor's last element,
so the receiver has really opened it) and ``result`` (the proc returns a tensor it made
beforehand; the client reads its last element). Each figure is the median of
``--repeat`` calls after one warm-up, given as milliseconds and as the equivalent GB/s
(size / time). Baselines measured in the same run, in the client: ``d2d`` a device-to-
device copy of the same size (``clone``), ``d2h+h2d`` a pinned copy out and back in,
the floor of any path through host memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from benchmarks._timing import p50

MIB = 1 << 20


def _baselines(sizes: list[int], repeat: int) -> dict[str, dict[int, float]]:
    import torch

    out: dict[str, dict[int, float]] = {"d2d": {}, "d2h+h2d": {}}
    for mib in sizes:
        dev = torch.ones(mib * MIB // 4, device="cuda")
        host = torch.empty(dev.shape, pin_memory=True)

        def d2d(dev: Any = dev) -> None:
            dev.clone()
            torch.cuda.synchronize()

        def through_host(dev: Any = dev, host: Any = host) -> None:
            host.copy_(dev)
            dev.copy_(host)
            torch.cuda.synchronize()

        out["d2d"][mib] = p50(d2d, repeat, warmup=1)
        out["d2h+h2d"][mib] = p50(through_host, repeat, warmup=1)
        del dev, host
        torch.cuda.empty_cache()
    return out


def _child(sizes: list[int], repeat: int) -> None:
    import torch
    from benchmarks.bench_cuda_actors import CudaBench

    from tetrarch import this_host

    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        actor = procs.spawn("cuda_bench", CudaBench)
        rows: dict[str, dict[int, float]] = {"argument": {}, "result": {}}
        for mib in sizes:
            value = torch.ones(mib * MIB // 4, device="cuda")
            rows["argument"][mib] = p50(lambda v=value: actor.last.call_one(v).get(timeout=300), repeat, warmup=1)
            del value
            actor.prepare.call_one(mib * MIB // 4).get(timeout=300)

            def result() -> None:
                got = actor.payload.call_one().get(timeout=300)
                got[-1].item()

            rows["result"][mib] = p50(result, repeat, warmup=1)
            actor.prepare.call_one(0).get(timeout=300)
            torch.cuda.ipc_collect()
        print("RESULT " + json.dumps(rows))
    finally:
        procs.stop().get(timeout=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", default="64,1024")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.mib.split(",")]
    try:
        import torch
    except ImportError:
        print("no torch here: nothing to measure")
        return 0
    if args.child:
        _child(sizes, args.repeat)
        return 0
    if not torch.cuda.is_available():
        print(f"no GPU visible here (torch {torch.__version__}): nothing to measure")
        return 0
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    base = _baselines(sizes, args.repeat)
    paths: dict[str, dict[str, dict[str, float]]] = {}
    for path, flag in (("ipc", "1"), ("host", "0")):
        env = dict(os.environ, TETRARCH_CUDA_IPC=flag)
        run = subprocess.run([sys.executable, "-m", "benchmarks.bench_cuda_payload", "--child", "--mib", args.mib,
                              "--repeat", str(args.repeat)], env=env, capture_output=True, text=True, timeout=900)
        line = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
        if run.returncode or not line:
            print(f"{path}: failed\n{run.stdout}\n{run.stderr}")
            return 1
        paths[path] = json.loads(line[0][len("RESULT "):])
    table = []
    for mib in sizes:
        gb = mib * MIB / 1e9
        table.append(("d2d copy (baseline)", "", mib, base["d2d"][mib]))
        table.append(("d2h+h2d pinned (baseline)", "", mib, base["d2h+h2d"][mib]))
        for path in ("ipc", "host"):
            for row in ("argument", "result"):
                table.append((row, path, mib, paths[path][row][str(mib)]))
    if args.json:
        print(json.dumps([{"row": r, "path": p, "mib": m, "seconds": s} for r, p, m, s in table]))
        return 0
    print(f"{'row':28}{'path':6}{'MiB':>6}{'ms':>10}{'GB/s':>10}{'x d2d':>8}{'x d2h+h2d':>11}")
    for r, p, m, s in table:
        gb = m * MIB / 1e9
        print(f"{r:28}{p:6}{m:>6}{s * 1e3:>10.3f}{gb / s:>10.1f}{base['d2d'][m] / s:>8.2f}"
              f"{base['d2h+h2d'][m] / s:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
