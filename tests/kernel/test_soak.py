"""Soak: many calls, spawn/stop cycles and connection churn leave no slow leak.

The client's and a proc's threads, file descriptors and memory must stay flat across
rounds. ``make test`` runs a small size; ``TETRARCH_SOAK_ROUNDS=N`` runs longer.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil
import pytest

from kernel_actors import Counter, Info
from raw_socket import raw_connect
from tetrarch import ProcMesh, this_host
from tetrarch.testing import scaled

ROUNDS = int(os.environ.get("TETRARCH_SOAK_ROUNDS", "3"))
CALLS_PER_ROUND = 400
SPAWNS_PER_ROUND = 4
CHURN_PER_ROUND = 200  # unauthenticated connect/close cycles against the proc's listener

#: What "flat" allows between the warmed-up state and the end (a little slack for
#: allocator noise and lazily started threads, nothing that grows per round).
THREAD_SLACK = 3
FD_SLACK = 8
RSS_SLACK_MIB = 24

pytestmark = [pytest.mark.slow, pytest.mark.timeout(scaled(60 + 40 * ROUNDS))]


@dataclass(frozen=True)
class Usage:
    threads: int
    fds: int
    rss_mib: float

    @classmethod
    def of(cls, proc: psutil.Process) -> Usage:
        return cls(proc.num_threads(), proc.num_fds(), proc.memory_info().rss / (1 << 20))


def _connect_and_close(address: str) -> None:
    s = raw_connect(address)
    try:
        s.recv(4096)  # the listener's challenge: the connection was accepted and served
    finally:
        s.close()


def _round(pm: ProcMesh, info, address: str) -> None:
    # Churn first: the proc closes its side of each connection when it reads the EOF, a
    # little later; the calls below give its loop time to do so before usage is measured.
    for _ in range(CHURN_PER_ROUND):
        _connect_and_close(address)
    for i in range(CALLS_PER_ROUND // 2):
        assert info.echo.call_one(i).get(timeout=scaled(10)) == i
    counters = pm.spawn("soak_counters", Counter, 0)
    for _ in range(CALLS_PER_ROUND // 4):
        counters.incr.broadcast()
        counters.value.call().get(timeout=scaled(10))
    counters.stop().get(timeout=scaled(20))
    for _ in range(SPAWNS_PER_ROUND):
        mesh = pm.spawn("soak_cycle", Info)
        mesh.initialized.get(timeout=scaled(20))
        mesh.stop().get(timeout=scaled(20))


def _settled(proc: psutil.Process, limit: int) -> Usage:
    """The proc's usage once its descriptor count is at most ``limit`` (bounded wait).

    Closing the server side of a churned connection is asynchronous; a count above the
    limit that does not come down within the bound is a leak, and the caller's assert
    reports it.
    """
    deadline = time.monotonic() + scaled(10)
    usage = Usage.of(proc)
    while usage.fds > limit and time.monotonic() < deadline:
        time.sleep(0.05)  # polling a condition with a deadline, not synchronization by sleep
        usage = Usage.of(proc)
    return usage


def test_threads_fds_and_memory_stay_flat() -> None:
    pm = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        info = pm.slice(gpus=0).spawn("soak_info", Info)
        proc = psutil.Process(info.pid.call_one().get(timeout=scaled(20)))
        address = info._ids[0][0]
        client = psutil.Process()
        _round(pm, info, address)  # warm up: lazily started threads, caches, allocator pools
        before = Usage.of(client), Usage.of(proc)
        for _ in range(ROUNDS):
            _round(pm, info, address)
        after = Usage.of(client), _settled(proc, before[1].fds + FD_SLACK)
        for who, b, a in (("client", before[0], after[0]), ("proc", before[1], after[1])):
            assert a.threads - b.threads <= THREAD_SLACK, f"{who} threads grew: {b} -> {a}"
            assert a.fds - b.fds <= FD_SLACK, f"{who} file descriptors grew: {b} -> {a}"
            assert a.rss_mib - b.rss_mib <= RSS_SLACK_MIB, f"{who} memory grew: {b} -> {a}"
        print(f"soak x{ROUNDS}: client {before[0]} -> {after[0]}; proc {before[1]} -> {after[1]}")
    finally:
        pm.stop().get(timeout=scaled(30))
