"""A host that goes silent (its network cut, or the whole host frozen) fails the calls to its procs.

Nothing closes a connection when a network is cut: the client learns it only from the
heartbeats that stop. A host agent runs no user code, so its silence past
``TETRARCH_HOST_TIMEOUT`` means its host is unreachable; its procs, as silent, are declared
unreachable with it, and their pending calls fail with ``SupervisionError``. Here the
"host" is a fresh local host agent and its procs, all stopped with SIGSTOP: to the client
that is exactly what a cut looks like (open sockets, no traffic). plugins/alloc_slurm/tests cuts a real
(namespace) network with ``fake-hosts cut``.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

import tetrarch
from liveness_actors import Staller
from tetrarch import ActorMesh, MeshFailure, SupervisionError
from tetrarch.job import AllocatorJob
from tetrarch.testing import Collector, scaled, still_running

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(90))]

#: Nominal seconds: a short host timeout, pings five times as often.
HOST_S = 2.0
HEARTBEAT_S = 0.4
#: Detection slack (nominal s): one watchdog tick, the declaration, the reply.
SLACK_S = 3.0


@contextmanager
def one_host() -> Iterator[tuple[int, ActorMesh]]:
    """A fresh host agent (pings every HEARTBEAT_S) with two procs and a ``Staller`` on each."""
    with tetrarch.configured(heartbeat_interval=HEARTBEAT_S, frozen_timeout=float("inf")):
        job = AllocatorJob({"node": 1}, allocator="local")
        hosts = job.state().node
        agent = psutil.Process(hosts._host_records[0].pid)
        family = [agent]
        try:
            pm = hosts.spawn_procs(per_host={"gpus": 2})
            family += agent.children(recursive=True)
            mesh = pm.spawn("staller", Staller)
            assert mesh.ok.call().get(timeout=scaled(30)).values() == ["alive", "alive"]
        except BaseException:
            job.kill()
            raise
    try:
        yield agent.pid, mesh
    finally:
        for p in family:  # whatever a test stopped goes on, and ends with the job
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.NoSuchProcess:
                pass
        job.kill()


def _stop(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def test_a_silent_host_fails_pending_calls_to_its_procs(faults: Collector[MeshFailure]) -> None:
    with tetrarch.configured(host_timeout=HOST_S), one_host() as (agent, mesh):
        pids = mesh.pid.call().get(timeout=scaled(10)).values()
        pending = mesh.slice(gpus=0).sleep.call_one(3600)  # would wait an hour: no timeout of its own
        start = time.monotonic()
        _stop([agent, *pids])  # the whole host falls silent, sockets open
        with pytest.raises(SupervisionError) as info:
            pending.get(timeout=scaled(HOST_S + 30))
        elapsed = time.monotonic() - start
        assert HOST_S - HEARTBEAT_S <= elapsed < scaled(HOST_S + SLACK_S), elapsed  # silence began at the last ping
        text = str(info.value)
        assert "unreachable" in text and "TETRARCH_HOST_TIMEOUT=2" in text and "network was cut" in text, text
        failures = faults.wait(2, timeout=scaled(10))
        assert sorted(f.pid for f in failures) == sorted(pids), failures
        with pytest.raises(SupervisionError):  # and a new call fails at once
            mesh.slice(gpus=1).ok.call_one().get(timeout=scaled(10))


class _Warnings(logging.Handler):
    """Collects the messages of the ``tetrarch.launch`` warnings that contain ``needle``."""

    def __init__(self, needle: str) -> None:
        super().__init__(logging.WARNING)
        self.needle = needle
        self.found: Collector[str] = Collector(f"warnings with {needle!r}")

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.found.add(record.getMessage())


def test_a_frozen_agent_takes_its_procs_with_it_and_no_print_blocks_a_call(faults: Collector[MeshFailure]) -> None:
    """Only the agent stopped. A call that prints far more than a pipe holds still returns;
    once the agent is declared unreachable its procs are declared lost too (calls fail with
    ``SupervisionError`` naming the agent) and they exit, whether or not the agent resumes."""
    log = logging.getLogger("tetrarch.launch")
    seen = _Warnings("is unreachable")
    log.addHandler(seen)
    try:
        with tetrarch.configured(host_timeout=HOST_S), one_host() as (agent, mesh):
            pids = mesh.pid.call().get(timeout=scaled(10)).values()
            _stop([agent])
            # 256 KiB is four times what the pipe to the frozen agent holds: it used to block forever.
            assert mesh.slice(gpus=0).shout.call_one(256 * 1024).get(timeout=scaled(10)) == 256 * 1024
            (message,) = seen.found.wait(1, timeout=scaled(HOST_S + 30))
            assert message.startswith("host agent") and f"pid {agent}" in message, message
            # The warning comes just before the procs are declared lost; their failures, after.
            failures = faults.wait(2, timeout=scaled(10))
            assert sorted(f.pid for f in failures) == sorted(pids), failures
            with pytest.raises(SupervisionError) as info:
                mesh.ok.call().get(timeout=scaled(10))
            assert "lost with its host agent" in str(info.value), info.value
            assert still_running(pids, scaled(10)) == [], "the procs of a lost agent exit (told to by the client)"
    finally:
        log.removeHandler(seen)


def test_spawn_procs_on_a_frozen_agent_fails_when_the_agent_is_declared_lost() -> None:
    with tetrarch.configured(host_timeout=HOST_S, heartbeat_interval=HEARTBEAT_S, frozen_timeout=float("inf")):
        job = AllocatorJob({"node": 1}, allocator="local")
        try:
            hosts = job.state().node
            agent = hosts._host_records[0].pid
            _stop([agent])
            start = time.monotonic()
            with pytest.raises(tetrarch.ProcessStartError) as info:
                hosts.spawn_procs(per_host={"gpus": 1})
            elapsed = time.monotonic() - start
            assert elapsed < scaled(HOST_S + SLACK_S), f"failed after {elapsed:.1f} s, not when the agent was lost"
            assert "lost with its host agent" in str(info.value) and "unreachable" in str(info.value), info.value
        finally:
            try:
                os.kill(agent, signal.SIGCONT)
            except (OSError, UnboundLocalError):
                pass
            job.kill()
