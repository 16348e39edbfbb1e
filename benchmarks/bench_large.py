"""Large arguments and results: time and peak memory, next to a raw socket baseline from the same run.

    python benchmarks/bench_large.py [--transport ipc|tcp] [--mib 1024] [--repeat 2]

Cases: a ``bytes``, ``bytearray``, ``memoryview`` and numpy argument to an endpoint that
returns its length, and a ``bytes`` result. For each: the best wall time of ``--repeat``
runs, the speed it implies, its ratio to the raw baseline, and the extra peak resident
memory on each side in units of the payload (1.00 = one payload's worth on top of what
the process held before; the receiving side cannot do better than 1, the sending side
than 0). Peaks are read from ``VmHWM`` after resetting it (``/proc/self/clear_refs``),
so this runs on Linux only.

Baseline: a child process reads the same number of bytes from a plain socket of the
same kind (``recv_into``) while this process writes them with ``sendall``: the wire speed
of the machine, with no serialization. Twice: into a buffer it reuses (warm pages), and
into fresh memory each time, which is what a receiver that hands out a new object pays
(the kernel faults the pages in as it copies); ratios are against the latter.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from tetrarch import Actor, endpoint, this_host

_SINK = r"""
import mmap, socket, sys
kind, addr, n, fresh = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "fresh"
if kind == "ipc":
    s = socket.socket(socket.AF_UNIX); s.bind("\0" + addr)
else:
    s = socket.socket(); s.bind(("127.0.0.1", 0))
s.listen(1); print(s.getsockname()[1] if kind == "tcp" else "ok", flush=True)
c, _ = s.accept()
view = memoryview(mmap.mmap(-1, n))
while True:
    got = 0
    while got < n:
        k = c.recv_into(view[got:])
        if not k:
            sys.exit(0)
        got += k
    c.sendall(b"k")  # received: the sender's clock stops
    if fresh:  # untouched pages for the next round, as a receiver that hands out a new object needs
        view.release()
        view = memoryview(mmap.mmap(-1, n))
    c.sendall(b"r")  # ready for the next round
"""


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> int:
    """Reset this process's peak RSS to its current RSS; returns that RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


class Sink(Actor):
    def __init__(self) -> None:
        self.blob: bytes | None = None

    @endpoint
    def reset_peak(self) -> int:
        return _reset_peak()

    @endpoint
    def peak(self) -> int:
        return _status("VmHWM")

    @endpoint
    def nbytes(self, data: Any) -> int:
        return memoryview(data).nbytes

    @endpoint
    def prepare(self, n: int) -> None:
        self.blob = b"\x02" * n

    @endpoint
    def give(self) -> bytes | None:
        blob, self.blob = self.blob, None
        return blob


def raw_baseline(kind: str, n: int, repeat: int, fresh: bool) -> float:
    """Best seconds to move ``n`` bytes one way over a plain socket (plus a 1-byte ack).

    ``fresh``: the reader reads into new memory each time (else into the same, warm, buffer).
    """
    name = f"tetrarch-bench-large-{os.getpid()}"
    argv = [sys.executable, "-c", _SINK, kind, name, str(n), "fresh" if fresh else "warm"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if kind == "ipc":
        s = socket.socket(socket.AF_UNIX)
        s.connect("\0" + name)
    else:
        s = socket.create_connection(("127.0.0.1", int(line)))
    data = b"\x01" * n
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        s.sendall(data)
        s.recv(1)
        best = min(best, time.perf_counter() - t)
        s.recv(1)
    s.close()
    proc.wait(30)
    return best


def _measure(sink: Any, run: Callable[[], Any]) -> tuple[float, int, int, int, int]:
    """``(seconds, client rss before, client peak, actor rss before, actor peak)`` of one ``run()``."""
    actor_before = sink.reset_peak.call_one().get()
    client_before = _reset_peak()
    t = time.perf_counter()
    result = run()
    dt = time.perf_counter() - t
    client_peak = _status("VmHWM")
    del result
    return dt, client_before, client_peak, actor_before, sink.peak.call_one().get()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transport", default=os.environ.get("TETRARCH_TRANSPORT", "ipc"), choices=["ipc", "tcp"])
    ap.add_argument("--mib", type=int, default=1024, help="payload size in MiB (default 1024)")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    os.environ["TETRARCH_TRANSPORT"] = args.transport
    n = args.mib << 20
    warm = raw_baseline(args.transport, n, args.repeat, fresh=False)
    raw = raw_baseline(args.transport, n, args.repeat, fresh=True)

    procs = this_host().spawn_procs(per_host={"procs": 1})
    sink = procs.spawn("sink", Sink)
    sink.nbytes.call_one(b"warm up").get()
    cases: list[tuple[str, Callable[[], Any]]] = []
    try:
        import numpy  # noqa: F401
        kinds = ("bytes", "bytearray", "memoryview", "numpy")
    except ImportError:
        kinds = ("bytes", "bytearray", "memoryview")
    for kind in kinds:
        def make(kind: str = kind) -> Any:
            data: Any = b"\x01" * n
            if kind == "bytearray":
                data = bytearray(data)
            elif kind == "memoryview":
                data = memoryview(bytearray(data))
            elif kind == "numpy":
                import numpy as np

                data = np.frombuffer(bytearray(data), dtype=np.uint8)
            return data
        cases.append((f"{kind} argument", make))
    print(f"transport: {args.transport}   payload: {args.mib} MiB   cores: {os.cpu_count()}   "
          f"python: {sys.version.split()[0]}")
    print(f"raw socket, one way, into a reused buffer: {warm:.3f} s = {n / warm / 1e9:.2f} GB/s")
    print(f"raw socket, one way, into fresh memory:    {raw:.3f} s = {n / raw / 1e9:.2f} GB/s  (raw below)")
    print(f"{'':22}{'seconds':>9}{'GB/s':>8}{'raw/this':>10}{'client peak':>13}{'actor peak':>12}   (x payload)")

    def row(label: str, samples: list[tuple[float, int, int, int, int]]) -> None:
        dt = min(s[0] for s in samples)
        client = max(s[2] - s[1] for s in samples) / n
        actor = max(s[4] - s[3] for s in samples) / n
        print(f"{label:22}{dt:9.3f}{n / dt / 1e9:8.2f}{raw / dt:10.2f}{client:13.2f}{actor:12.2f}")

    for label, make in cases:
        samples = []
        for _ in range(args.repeat):
            data = make()
            samples.append(_measure(sink, lambda data=data: sink.nbytes.call_one(data).get()))
            del data
        row(label, samples)
    samples = []
    for _ in range(args.repeat):
        sink.prepare.call_one(n).get()
        samples.append(_measure(sink, lambda: sink.give.call_one().get()))
    row("bytes result", samples)
    procs.stop().get()


if __name__ == "__main__":
    main()
