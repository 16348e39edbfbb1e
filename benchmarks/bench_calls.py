"""Call latency and pipelined throughput, next to a raw socket baseline from the same run.

    python benchmarks/bench_calls.py [--transport ipc|tcp|zmq] [--calls 2000] [--pipelined 10000]

Baseline: a child process echoes length-prefixed messages over a plain socket of the
same kind (Unix or TCP loopback), with the same 2000 sequential round trips and the
same pipelined burst. The ratios say what tetrarch's actor layer costs on top.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import time

from tetrarch import Actor, endpoint, this_host

_ECHO = r"""
import socket, struct, sys
kind, addr = sys.argv[1], sys.argv[2]
if kind == "ipc":
    s = socket.socket(socket.AF_UNIX); s.bind("\0" + addr)
else:
    s = socket.socket(); s.bind(("127.0.0.1", 0))
s.listen(1); print(s.getsockname()[1] if kind == "tcp" else "ok", flush=True)
c, _ = s.accept()
if kind == "tcp":
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b""
while True:
    d = c.recv(1 << 16)
    if not d:
        break
    buf += d
    out = []
    while len(buf) >= 4:
        (n,) = struct.unpack_from("!I", buf)
        if len(buf) < 4 + n:
            break
        out.append(buf[:4 + n]); buf = buf[4 + n:]
    if out:
        c.sendall(b"".join(out))
"""


class Noop(Actor):
    @endpoint
    def noop(self) -> None:
        return None


def _pcts(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99) - 1]


def raw_baseline(kind: str, calls: int, pipelined: int) -> tuple[float, float, float]:
    name = f"tetrarch-bench-{os.getpid()}"
    proc = subprocess.Popen([sys.executable, "-c", _ECHO, kind, name], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if kind == "ipc":
        s = socket.socket(socket.AF_UNIX)
        s.connect("\0" + name)
    else:
        s = socket.create_connection(("127.0.0.1", int(line)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = struct.pack("!I", 8) + b"x" * 8

    def recv_n(n: int) -> None:
        got = 0
        while got < n:
            got += len(s.recv(min(1 << 16, n - got)))

    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        s.sendall(msg)
        recv_n(len(msg))
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(pipelined):
        s.sendall(msg)
    recv_n(len(msg) * pipelined)
    rate = pipelined / (time.perf_counter() - t)
    s.close()
    proc.wait(10)
    p50, p99 = _pcts(lat)
    return p50, p99, rate


_ZMQ_ECHO = r"""
import sys, zmq
ctx = zmq.Context(); s = ctx.socket(zmq.REP); s.bind(sys.argv[1]); print("ok", flush=True)
while True:
    m = s.recv()
    if m == b"quit":
        s.send(b""); break
    s.send(m)
"""


def zmq_baseline(calls: int) -> tuple[float, float] | None:
    """p50/p99 of a raw pyzmq REQ/REP round trip over ipc (the figure Monarch and Ray are quoted against)."""
    try:
        import zmq
    except ImportError:
        return None
    addr = f"ipc://@tetrarch-bench-zmq-{os.getpid()}"
    proc = subprocess.Popen([sys.executable, "-c", _ZMQ_ECHO, addr], stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.connect(addr)
    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        s.send(b"x" * 8)
        s.recv()
        lat.append(time.perf_counter() - t)
    s.send(b"quit")
    s.recv()
    s.close()
    ctx.term()
    proc.wait(10)
    return _pcts(lat)


_NNG_ECHO = r"""
import sys, pynng
s = pynng.Pair0(listen=sys.argv[1]); print("ok", flush=True)
while True:
    m = s.recv()
    if m == b"quit":
        break
    s.send(m)
s.close()
"""


def nng_baseline(calls: int, pipelined: int) -> tuple[float, float, float] | None:
    """p50/p99 of a raw pynng pair0 round trip over ipc, and its pipelined echo rate."""
    try:
        import pynng
    except ImportError:
        return None
    addr = f"abstract://tetrarch-bench-nng-{os.getpid()}"
    proc = subprocess.Popen([sys.executable, "-c", _NNG_ECHO, addr], stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    s = pynng.Pair0(dial=addr)
    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        s.send(b"x" * 8)
        s.recv()
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    done = 0
    for _ in range(pipelined):  # keep at most 64 in flight: pair0 has small queues
        s.send(b"x" * 8)
        if _ >= 64:
            s.recv()
            done += 1
    for _ in range(pipelined - done):
        s.recv()
    rate = pipelined / (time.perf_counter() - t)
    s.send(b"quit")
    s.close()
    proc.wait(10)
    p50, p99 = _pcts(lat)
    return p50, p99, rate


def tetrarch_calls(calls: int, pipelined: int) -> tuple[float, float, float]:
    procs = this_host().spawn_procs(per_host={"procs": 1})
    noop = procs.spawn("noop", Noop).noop
    for _ in range(200):  # warm up connections and code paths
        noop.call_one().get()
    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        noop.call_one().get()
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    futs = [noop.call_one() for _ in range(pipelined)]
    for f in futs:
        f.get()
    rate = pipelined / (time.perf_counter() - t)
    procs.stop().get()
    p50, p99 = _pcts(lat)
    return p50, p99, rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transport", default=os.environ.get("TETRARCH_TRANSPORT", "ipc"),
                    choices=["ipc", "tcp", "zmq", "nng"])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--pipelined", type=int, default=10000)
    args = ap.parse_args()
    os.environ["TETRARCH_TRANSPORT"] = args.transport
    # zmq's and nng's addresses default to ipc: their raw socket baseline is a Unix socket,
    # next to the raw library's own
    r50, r99, rrate = raw_baseline("tcp" if args.transport == "tcp" else "ipc", args.calls, args.pipelined)
    z = zmq_baseline(args.calls) if args.transport in ("ipc", "zmq") else None
    n = nng_baseline(args.calls, args.pipelined) if args.transport == "nng" else None
    t50, t99, trate = tetrarch_calls(args.calls, args.pipelined)
    us = 1e6
    print(f"transport: {args.transport}   cores: {os.cpu_count()}   python: {sys.version.split()[0]}")
    print(f"{'':28}{'raw socket':>14}{'tetrarch':>14}{'ratio':>10}")
    print(f"{'call_one p50 (us)':28}{r50 * us:14.1f}{t50 * us:14.1f}{t50 / r50:10.2f}")
    print(f"{'call_one p99 (us)':28}{r99 * us:14.1f}{t99 * us:14.1f}{t99 / r99:10.2f}")
    print(f"{'pipelined (calls/s)':28}{rrate:14.0f}{trate:14.0f}{trate / rrate:10.3f}")
    if z is not None:
        print(f"raw pyzmq REQ/REP ipc round trip: p50 {z[0] * us:.1f} us, p99 {z[1] * us:.1f} us "
              f"(tetrarch p50 / pyzmq p50 = {t50 / z[0]:.2f})")
    if n is not None:
        print(f"raw pynng pair0 ipc round trip: p50 {n[0] * us:.1f} us, p99 {n[1] * us:.1f} us, "
              f"pipelined {n[2]:.0f}/s (tetrarch p50 / pynng p50 = {t50 / n[0]:.2f})")


if __name__ == "__main__":
    main()
