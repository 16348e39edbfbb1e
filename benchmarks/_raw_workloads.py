"""The suite's raw baselines (``_workloads.RAW``): each workload with no framework, the plain library.

``run(baseline, workload, size, p)`` measures one; times in seconds. Nothing here
imports tetrarch.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from multiprocessing.connection import Connection
from typing import Any

from _baselines import Peer
from _payloads import memcpy_s
from _timing import p50, payload_gbps, per_round, rate
from _workloads import split_size


def _echo(conn: Connection) -> None:
    """A forked process's loop: every message back as it is, until ``None``."""
    while (msg := conn.recv()) is not None:
        conn.send(msg)


def _ready(conn: Connection) -> None:
    conn.send(b"ready")


def _spawned(method: str, n: int) -> float:
    """Seconds to start ``n`` processes with ``method`` until each has answered once over its Pipe."""
    t = time.perf_counter()
    ctx: Any = mp.get_context(method)  # BaseContext's stubs lack Process
    pipes = [ctx.Pipe(duplex=False) for _ in range(n)]
    procs = [ctx.Process(target=_ready, args=(w,)) for _, w in pipes]
    for proc in procs:
        proc.start()
    for r, _ in pipes:
        r.recv()
    figure = time.perf_counter() - t
    for proc in procs:
        proc.join(30)
    return figure


def _pipe_call(p: dict[str, Any]) -> float:
    ctx: Any = mp.get_context("fork")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_echo, args=(there,))
    proc.start()

    def roundtrip() -> None:
        here.send(b"x" * 8)
        here.recv()

    try:
        return p50(roundtrip, p["calls"], warmup=p["warmup"])
    finally:
        here.send(None)
        proc.join(30)


def _fanout(size: str, p: dict[str, Any]) -> float:
    shape = split_size(size)
    peers = [Peer("zmq", "ipc") for _ in range(shape[0])]

    def round_trip() -> None:  # a message per actor: K to each proc's peer
        for _ in range(shape[1]):
            for peer in peers:
                peer.send(b"x" * 8)
        for _ in range(shape[1]):
            for peer in peers:
                peer.recv()

    try:
        return per_round(round_trip, p)
    finally:
        for peer in peers:
            peer.close()


def run(baseline: str, workload: str, size: str, p: dict[str, Any]) -> float:
    """One raw figure of ``workload`` at ``size`` with ``baseline`` (a key of ``_workloads.RAW``)."""
    workload = workload.removesuffix("_async")  # no endpoint to be async: the same raw figure
    if (baseline, workload) == ("pipe", "call"):
        return _pipe_call(p)
    if baseline in ("fork", "forkserver") and workload == "spawn":
        return _spawned(baseline, int(size))
    if (baseline, workload) == ("memcpy", "payload"):
        n = int(size) << 20
        return n / memcpy_s(n, p["payload_calls"]) / 1e9
    if (baseline, workload) == ("zmq", "fanout"):
        return _fanout(size, p)
    kinds = {("zmq", "call"): "zmq", ("zmq", "pipelined"): "zmq", ("unix", "payload"): "socket"}
    if (baseline, workload) not in kinds:
        raise KeyError(f"no raw {baseline} baseline for {workload}")
    peer = Peer(kinds[baseline, workload], "ipc")
    try:
        if workload == "call":
            return p50(peer.roundtrip, p["calls"], warmup=p["warmup"])
        if workload == "pipelined":
            for _ in range(p["warmup"]):
                peer.roundtrip()
            return rate(lambda n: peer.pipelined(n, 1000), int(size))
        return payload_gbps(peer.payload, int(size), p)
    finally:
        peer.close()
