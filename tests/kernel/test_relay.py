"""Mesh calls through per-host relays (``services/_relay``): the client pays one message per host.

A mesh of 4 local hosts x 16 procs: a call costs the client one message out and one back
per host, not per proc; ``broadcast`` and ``stream`` one message out per host; results,
errors, per-sender order (relayed and direct calls mixed) and supervision (a proc killed
mid-call) are as for direct calls.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from relay_actors import Relayed
from tetrarch import ActorError, SupervisionError
from tetrarch._runtime.process._root import get_root
from tetrarch._runtime.router._sequencer import Sequencer
from tetrarch._runtime.values import _wire
from tetrarch.config import configured
from tetrarch.job import ProcessJob
from tetrarch.testing import scaled

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(120))]

HOSTS, PER_HOST = 4, 16


@pytest.fixture(scope="module")
def relayed() -> Iterator[Any]:
    """64 ``Relayed`` actors on 4 hosts of 16 procs (relays on: the default ``relay_min`` is 16)."""
    job = ProcessJob({"hosts": HOSTS})
    try:
        procs = job.state().hosts.spawn_procs(per_host={"gpus": PER_HOST}, name="relayed")
        mesh = procs.spawn("relayed", Relayed)
        mesh.initialized.get(timeout=scaled(60))
        mesh.rank.call().get(timeout=scaled(30))  # every route is up
        yield mesh
    finally:
        job.kill()


@contextmanager
def counted() -> Iterator[tuple[list[Any], list[Any]]]:
    """The calls and casts the client sends, and the replies it receives, while the block runs."""
    rt = get_root().router
    sent: list[Any] = []
    got: list[Any] = []
    send, dispatch = rt.send, rt.dispatch

    def counting_send(address: str, frames: list, more: bool = False) -> None:
        hdr = _wire.decode(frames[0])
        if type(hdr) is _wire.CallHeader or (type(hdr) is _wire.SysHeader and hdr.service == _wire.SVC_RELAY):
            sent.append(hdr)
        send(address, frames, more)

    def counting_dispatch(frames: list, conn: Any) -> None:
        hdr = _wire.decode(frames[0])
        if type(hdr) is _wire.PortHeader and hdr.status in (_wire.OK, _wire.ERR, _wire.BATCH):
            got.append(hdr)
        dispatch(frames, conn)

    rt.send, rt.dispatch = counting_send, counting_dispatch  # type: ignore[method-assign]
    try:
        yield sent, got
    finally:
        del rt.send, rt.dispatch


def test_a_call_costs_the_client_one_message_per_host_each_way(relayed) -> None:
    with counted() as (sent, got):
        ranks = relayed.rank.call().get(timeout=scaled(30))
    assert sorted(ranks.values()) == list(range(HOSTS * PER_HOST))
    assert [r for _, r in ranks.items()] == list(range(HOSTS * PER_HOST)), "values keep their ranks"
    assert len(sent) == HOSTS, f"{len(sent)} messages out for {HOSTS} hosts"
    assert len(got) == HOSTS, f"{len(got)} messages back for {HOSTS} hosts"
    with configured(relay_min=0), counted() as (sent, got):  # relays off: one message per actor
        assert sorted(relayed.rank.call().get(timeout=scaled(30)).values()) == list(range(HOSTS * PER_HOST))
    assert len(sent) == len(got) == HOSTS * PER_HOST


def test_broadcast_and_stream_send_one_message_per_host(relayed) -> None:
    relayed.take_log.call().get(timeout=scaled(30))
    with counted() as (sent, _):
        relayed.add.broadcast(7)
        streamed = sorted(f.get(timeout=scaled(30)) for f in relayed.rank.stream())
    assert len(sent) == 2 * HOSTS
    assert streamed == list(range(HOSTS * PER_HOST)), "stream still gives one future per rank"
    assert all(log == [7] for log in relayed.take_log.call().get(timeout=scaled(30)).values())


def test_identical_values_travel_once_and_arrive_as_distinct_objects(relayed) -> None:
    with counted() as (_, got):
        values = list(relayed.empty.call().get(timeout=scaled(30)).values())
    assert values == [[]] * (HOSTS * PER_HOST)
    assert len({id(v) for v in values}) == len(values), "each rank's value is its own object"
    assert [h.status for h in got] == [_wire.BATCH] * HOSTS


def test_a_rank_that_raises_fails_the_relayed_call(relayed) -> None:
    with pytest.raises(ActorError, match="rank 21 fails on purpose"):
        relayed.fail_at.call(21).get(timeout=scaled(30))
    assert sorted(relayed.fail_at.call(-1).get(timeout=scaled(30)).values()) == list(range(HOSTS * PER_HOST))


def test_relayed_and_direct_calls_from_one_sender_run_in_send_order(relayed) -> None:
    """Broadcasts (relayed), calls to one actor and to a one-host slice (direct or relayed) interleave."""
    relayed.take_log.call().get(timeout=scaled(30))
    n = 400
    expected: dict[int, list[int]] = {r: [] for r in range(HOSTS * PER_HOST)}
    for seq in range(n):
        kind = seq % 4
        if kind == 0:
            relayed.add.broadcast(seq)
            targets = list(expected)
        elif kind == 1:
            r = seq % (HOSTS * PER_HOST)
            relayed.slice(hosts=r // PER_HOST, gpus=r % PER_HOST).add.broadcast(seq)  # one actor: straight
            targets = [r]
        elif kind == 2:
            h = seq % HOSTS
            relayed.slice(hosts=h).add.broadcast(seq)  # 16 actors of one host: its relay
            targets = [h * PER_HOST + g for g in range(PER_HOST)]
        else:
            h, g = seq % HOSTS, seq % (PER_HOST - 2)
            relayed.slice(hosts=h, gpus=slice(g, g + 2)).add.broadcast(seq)  # two actors: straight
            targets = [h * PER_HOST + g, h * PER_HOST + g + 1]
        for r in targets:
            expected[r].append(seq)
    logs = relayed.take_log.call().get(timeout=scaled(60))
    for (point, log), r in zip(logs.items(), range(HOSTS * PER_HOST), strict=True):
        assert log == expected[r], f"actor {point}: order broken or messages lost"


def test_a_proc_killed_mid_call_fails_the_relayed_call_and_the_rest_keep_working() -> None:
    job = ProcessJob({"hosts": 2})
    try:
        procs = job.state().hosts.spawn_procs(per_host={"gpus": 4}, name="relay-kill")
        mesh = procs.spawn("relay_kill", Relayed)
        with configured(relay_min=2):
            pids = list(mesh.pid.call().get(timeout=scaled(60)).values())
            victim = pids[5]  # host 1, gpu 1
            pending = mesh.hang_at.call(victim)
            os.kill(victim, signal.SIGKILL)
            with pytest.raises(SupervisionError, match="rank 5"):
                pending.get(timeout=scaled(30))
            healthy = mesh.slice(hosts=1, gpus=slice(2, 4))
            assert sorted(healthy.rank.call().get(timeout=scaled(30)).values()) == [0, 1]
            assert sorted(mesh.slice(hosts=0).rank.call().get(timeout=scaled(30)).values()) == [0, 1, 2, 3]
    finally:
        job.kill()


# --------------------------------------------------------------------------- the sequencer itself


@pytest.mark.parametrize(("relay_min", "relayed"), [(2, True), (3, False), (0, False)])
def test_procs_that_will_be_relayed_to_connect_to_their_host_agent_when_ready(relay_min: int, relayed: bool) -> None:
    """A relayed call would otherwise wait for the agent to dial each proc (a first call's cost, issue 33)."""
    from tetrarch import this_host

    with configured(relay_min=relay_min):
        procs = this_host().spawn_procs(per_host={"procs": 2})
    try:
        links = procs.spawn("linked", Relayed).agent_link.call(scaled(30)).get(timeout=scaled(60)).values()
        if relayed:
            assert [tuple(link) for link in links] == [("1", True)] * 2
        else:
            assert [env for env, _ in links] == [None, None]
    finally:
        procs.stop().get(timeout=scaled(60))


def test_the_sequencer_delivers_each_origin_in_its_order_whatever_the_arrival() -> None:
    seq = Sequencer()
    out: list[tuple[str, int]] = []
    for origin, n in [("a#1", 2), ("b#1", 1), ("a#1", 3), ("a#1", 1), ("b#1", 3), ("b#1", 2)]:
        seq.admit(origin, n, lambda o, k: out.append((o, k)), origin, n)
    assert [k for o, k in out if o == "a#1"] == [1, 2, 3]
    assert [k for o, k in out if o == "b#1"] == [1, 2, 3]
    assert seq.holding() == 0


def test_the_sequencer_gives_up_a_gap_when_the_senders_connection_drops() -> None:
    seq = Sequencer()
    out: list[int] = []
    seq.admit("a#1", 1, out.append, 1)
    seq.admit("a#1", 3, out.append, 3)  # 2 was in flight on the connection that drops
    assert out == [1] and seq.holding() == 1
    seq.peer_lost("b")  # another address: nothing of a's is released
    assert out == [1] and seq.holding() == 1
    seq.peer_lost("a")
    assert out == [1, 3] and seq.holding() == 0
    seq.admit("a#1", 2, out.append, 2)  # late: delivered, never dropped
    seq.admit("a#1", 9, out.append, 9)  # after a loss the origin's messages go as they come
    assert out == [1, 3, 2, 9]
