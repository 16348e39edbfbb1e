"""Message ordering: per sender, messages are handled in send order, whatever the adverb.

Several senders (actors on the mesh and threads of the client) send numbered messages
to a mesh of recorders through ``broadcast``, ``call``, ``call_one`` and ``broadcast``
on slices, ``send(endpoint, args, port=...)``, and ``Port.send`` to a client channel.
Every receiver must see each sender's numbers strictly increasing, none missing.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from order_actors import N_RECORDERS, WAIT_S, OrderSender, Recorder, drive, expected_at, interleave, plan
from tetrarch import Channel, this_host
from tetrarch.config import configured
from tetrarch.testing import scaled

TOTAL = 10_000
N_ACTOR_SENDERS = 4
N_THREAD_SENDERS = 2
#: Nominal seconds (scaled) the whole stress run may take.
STRESS_RUN_WITHIN_S = 45.0


def _per_sender(log: list[tuple[int, int]]) -> dict[int, list[int]]:
    seqs: dict[int, list[int]] = defaultdict(list)
    for sender, seq in log:
        seqs[sender].append(seq)
    return seqs


def _assert_in_order(where: str, got: list[int], want: list[int]) -> None:
    bad = next((i for i in range(1, len(got)) if got[i] <= got[i - 1]), None)
    assert bad is None, f"{where}: {got[bad]} arrived after {got[bad - 1]} (position {bad})"
    missing = sorted(set(want) - set(got))
    assert not missing, f"{where}: {len(missing)} messages missing, first {missing[:10]}"
    assert got == want, f"{where}: unexpected extra messages {sorted(set(got) - set(want))[:10]}"


def _drain(receiver, n: int) -> list:
    return [receiver.recv().get(timeout=WAIT_S) for _ in range(n)]


@pytest.fixture
def relayed_procs():
    """4 procs whose client and actors send mesh calls through the host agent (``relay_min=2``)."""
    with configured(relay_min=2):
        pm = this_host().spawn_procs(per_host={"gpus": N_RECORDERS}, name="relayed")
        try:
            yield pm
        finally:
            pm.stop().get(timeout=WAIT_S)


@pytest.mark.timeout(scaled(60))
def test_ten_thousand_messages_from_six_senders_arrive_in_order(procs):
    _ten_thousand_messages_from_six_senders(procs)


@pytest.mark.timeout(scaled(90))
def test_ten_thousand_messages_arrive_in_order_when_mesh_calls_go_through_relays(relayed_procs):
    """The same run with the calls to several recorders relayed by the host agent and those to one
    recorder sent straight: each sender's numbers still arrive in order at every recorder."""
    with configured(relay_min=2):
        _ten_thousand_messages_from_six_senders(relayed_procs)


def _ten_thousand_messages_from_six_senders(procs) -> None:
    recorders = procs.spawn("order_recorders", Recorder)
    senders = procs.spawn("order_senders", OrderSender)
    replies, reply_rx = Channel.open()  # send(..., port=replies): one reply per target actor
    direct, direct_rx = Channel.open()  # Port.send from the senders

    n_senders = N_ACTOR_SENDERS + N_THREAD_SENDERS
    counts = [TOTAL // n_senders + (1 if i < TOTAL % n_senders else 0) for i in range(n_senders)]
    assert sum(counts) == TOTAL
    actor_n = counts[0]
    assert counts[:N_ACTOR_SENDERS] == [actor_n] * N_ACTOR_SENDERS
    thread_ids = [200 + t for t in range(N_THREAD_SENDERS)]
    thread_counts = counts[N_ACTOR_SENDERS:]
    n_of = {100 + r: actor_n for r in range(N_ACTOR_SENDERS)}
    n_of.update(zip(thread_ids, thread_counts, strict=True))

    t0 = time.monotonic()
    running = senders.run.call(actor_n, recorders, replies, direct)  # 4 actor senders, concurrently
    errors: list[BaseException] = []

    def client_sender(sender: int, n: int) -> None:
        try:
            drive(sender, n, recorders, replies, direct)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=client_sender, args=(sid, n), name=f"order-sender-{sid}")
               for sid, n in zip(thread_ids, thread_counts, strict=True)]
    for t in threads:
        t.start()
    assert running.get(timeout=WAIT_S).values() == [actor_n] * N_ACTOR_SENDERS
    for t in threads:
        t.join(timeout=WAIT_S)
        assert not t.is_alive(), f"{t.name} did not finish"
    assert not errors, errors
    elapsed = time.monotonic() - t0

    # Every sender's flush() answered: each recorder has handled all of its messages.
    logs = recorders.dump.call().get(timeout=WAIT_S).values()
    for rank, log in enumerate(logs):
        seqs = _per_sender(log)
        assert set(seqs) <= set(n_of), f"recorder {rank}: unknown senders {set(seqs) - set(n_of)}"
        for sender, n in n_of.items():
            _assert_in_order(f"recorder {rank}, sender {sender}", seqs.get(sender, []),
                             expected_at(sender, n, rank))

    # Port.send to a channel: the client's receiver sees each sender's messages in order.
    want_direct = {s: [q for q in range(n) if plan(s, q)[0] == "port"] for s, n in n_of.items()}
    got_direct = _per_sender(_drain(direct_rx, sum(map(len, want_direct.values()))))
    for sender, want in want_direct.items():
        _assert_in_order(f"channel, sender {sender}", got_direct.get(sender, []), want)

    # send(..., port=replies): one reply per target, in order per (recorder, sender).
    want_replies = {(r, s): [q for q in range(n) if plan(s, q)[0] == "send" and r in plan(s, q)[1]]
                    for s, n in n_of.items() for r in range(N_RECORDERS)}
    got_replies: dict[tuple[int, int], list[int]] = defaultdict(list)
    for rank, sender, seq in _drain(reply_rx, sum(map(len, want_replies.values()))):
        got_replies[(rank, sender)].append(seq)
    for key, want in want_replies.items():
        _assert_in_order(f"reply port, (recorder, sender) {key}", got_replies.get(key, []), want)

    # Nothing more is on its way: no duplicates were delivered.
    extra_direct, extra_reply = direct_rx.recv(), reply_rx.recv()
    recorders.flush.call().get(timeout=WAIT_S)
    assert not extra_direct.done() and not extra_reply.done()
    direct_rx.close()
    reply_rx.close()

    delivered = sum(len(log) for log in logs)
    assert delivered > TOTAL  # broadcasts and calls reach several recorders
    print(f"\n{TOTAL} messages ({delivered} recorder deliveries) in {elapsed:.2f} s")
    # A hang catcher, not a benchmark: the run takes about 1 s on an idle machine.
    assert elapsed < scaled(STRESS_RUN_WITHIN_S), f"the stress run took {elapsed:.1f} s"


@pytest.mark.timeout(scaled(60))
@pytest.mark.parametrize("sender_kind", ["client", "actor"])
def test_one_sender_through_slices_and_full_mesh_keeps_send_order(procs, sender_kind):
    recorders = procs.spawn(f"interleave_{sender_kind}", Recorder)
    replies, reply_rx = Channel.open()
    n = 600
    if sender_kind == "client":
        assert interleave(7, n, recorders, replies) == n
    else:
        sender = procs.spawn(f"interleaver_{sender_kind}", OrderSender).slice(gpus=0)
        assert sender.interleave.call_one(n, recorders, replies).get(timeout=WAIT_S) == n
    logs = recorders.dump.call().get(timeout=WAIT_S).values()
    assert all({s for s, _ in log} == {7} for log in logs)
    seqs = [[q for _, q in log] for log in logs]
    # Rank 2 is in every target (full mesh, gpus=2, gpus=1:3): it saw everything, in send order.
    assert seqs[2] == list(range(n))
    assert seqs[1] == [q for q in range(n) if q % 6 in (0, 3, 4)]
    assert seqs[0] == seqs[3] == [q for q in range(n) if q % 6 in (0, 4)]
    # The send() replies came back through the port in order too.
    assert _drain(reply_rx, n // 6) == [(2, 7, q) for q in range(5, n, 6)]
    reply_rx.close()
