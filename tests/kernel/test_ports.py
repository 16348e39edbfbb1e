"""Ports and channels, explicit response ports, ``send`` and ``Accumulator``."""

from __future__ import annotations

import asyncio
import operator
import pickle
import threading

import pytest

from port_actors import Ported, Sender
from tetrarch import (
    Accumulator,
    ActorError,
    Channel,
    Port,
    PortReceiver,
    SupervisionError,
    ValueMesh,
    send,
    this_host,
)
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


@pytest.fixture(scope="module")
def senders(procs):
    return procs.spawn("senders", Sender)


@pytest.fixture(scope="module")
def ported(procs):
    return procs.spawn("ported", Ported)


def _drain_barrier(mesh) -> None:
    """Every message the actors sent before this call has reached this process.

    Each actor answers the call after its earlier sends, over the same ordered route.
    """
    mesh.rank.call().get(timeout=scaled(30))


# -- channels -------------------------------------------------------------------------


def test_port_as_argument_receives_in_order_sends(senders):
    port, receiver = Channel[int].open()
    senders.slice(gpus=0).send_many.broadcast(port, 100)
    assert [receiver.recv().get(timeout=scaled(30)) for _ in range(100)] == list(range(100))


def test_each_rank_sends_its_rank_through_a_passed_port(senders):
    port, receiver = Channel.open()
    senders.send_rank.broadcast(port)
    assert sorted(receiver.recv().get(timeout=scaled(30)) for _ in range(4)) == [0, 1, 2, 3]


def test_local_send_and_recv_and_futures_wait_in_line():
    port, receiver = Channel.open()
    first, second = receiver.recv(), receiver.recv()
    assert not first.done()
    port.send("a")
    port.send({"b": [1, 2]})
    assert first.get(timeout=scaled(5)) == "a"
    assert second.get(timeout=scaled(5)) == {"b": [1, 2]}


def test_recv_timeout_keeps_the_future_usable():
    port, receiver = Channel.open()
    fut = receiver.recv()
    with pytest.raises(TimeoutError):
        fut.get(timeout=0.05)
    port.send(7)
    assert fut.get(timeout=scaled(5)) == 7


def test_recv_from_asyncio():
    port, receiver = Channel.open()

    async def main() -> int:
        fut = receiver.recv()
        port.send(11)
        return await fut

    assert asyncio.run(main()) == 11


def test_port_exception_makes_recv_raise_actor_error(senders):
    port, receiver = Channel.open()
    senders.slice(gpus=1).fail_through.broadcast(port, "nope")
    with pytest.raises(ActorError) as info:
        receiver.recv().get(timeout=scaled(30))
    assert isinstance(info.value.exception, KeyError)
    assert "nope" in str(info.value)
    # Locally too, and the receiver keeps working afterwards.
    port.exception(ValueError("local"))
    with pytest.raises(ActorError) as info:
        receiver.recv().get(timeout=scaled(5))
    assert isinstance(info.value.exception, ValueError)
    port.send("after")
    assert receiver.recv().get(timeout=scaled(5)) == "after"


def test_port_exception_needs_an_exception():
    port, _receiver = Channel.open()
    with pytest.raises(TypeError, match="exception instance"):
        port.exception("not an exception")  # type: ignore[arg-type]


def test_once_port_accepts_one_message():
    port, receiver = Channel.open(once=True)
    assert port.once
    port.send(1)
    with pytest.raises(ValueError, match="once=True"):
        port.send(2)
    with pytest.raises(ValueError, match="once=True"):
        port.exception(RuntimeError("x"))
    assert receiver.recv().get(timeout=scaled(5)) == 1
    with pytest.raises(EOFError, match="Port closed"):
        receiver.recv().get(timeout=scaled(5))


def test_unpicklable_value_is_a_type_error_naming_the_type():
    port, _receiver = Channel.open()
    with pytest.raises(TypeError, match="lock"):
        port.send(threading.Lock())


def test_closed_receiver_drops_messages_and_fails_waiters(senders):
    port, receiver = Channel.open()
    port.send("kept")
    receiver.close()
    assert receiver.recv().get(timeout=scaled(5)) == "kept"  # arrived before the close
    waiting_after = receiver.recv()
    with pytest.raises(EOFError):
        waiting_after.get(timeout=scaled(5))
    with pytest.raises(ValueError, match="its receiver was closed"):
        port.send("refused")  # in the receiver's own process: a clear error
    senders.send_many.broadcast(port, 10)  # remote senders' messages are dropped; they are not hurt
    assert senders.rank.call().get(timeout=scaled(30)).values() == [0, 1, 2, 3]
    receiver.close()  # twice is fine


def test_close_fails_futures_already_waiting():
    _port, receiver = Channel.open()
    fut = receiver.recv()
    receiver.close()
    with pytest.raises(EOFError):
        fut.get(timeout=scaled(5))


def test_ports_pickle_and_survive_a_round_trip_through_an_actor(senders):
    port, receiver = Channel.open()
    back = senders.slice(gpus=2).echo.call_one(port).get(timeout=scaled(30))
    assert isinstance(back, Port) and back is not port
    back.send("via the round trip")
    assert receiver.recv().get(timeout=scaled(5)) == "via the round trip"
    pickle.loads(pickle.dumps(port)).send("local copy")
    assert receiver.recv().get(timeout=scaled(5)) == "local copy"


def test_receiver_is_not_picklable():
    _port, receiver = Channel.open()
    assert isinstance(receiver, PortReceiver)
    with pytest.raises(TypeError, match="pass its Port"):
        pickle.dumps(receiver)


# -- explicit response ports ---------------------------------------------------------------


def test_explicit_port_value_is_the_call_one_result(ported):
    one = ported.slice(gpus=0)
    assert one.add.call_one(2, 3).get(timeout=scaled(30)) == 5
    assert one.async_add.call_one(4, 5).get(timeout=scaled(30)) == 9


def test_explicit_port_call_gathers_a_value_mesh(ported):
    result = ported.rank_times.call(10).get(timeout=scaled(30))
    assert isinstance(result, ValueMesh)
    assert result.values() == [0, 10, 20, 30]
    assert sorted(f.get(timeout=scaled(30)) for f in ported.rank_times.stream(1)) == [0, 1, 2, 3]


def test_explicit_port_answered_later_from_another_thread(ported):
    one = ported.slice(gpus=1)
    pending = [one.later.call_one() for _ in range(3)]
    assert one.release.call_one("done").get(timeout=scaled(30)) == 3
    assert [f.get(timeout=scaled(30)) for f in pending] == ["done"] * 3


def test_explicit_port_exception_reaches_caller_as_actor_error(ported):
    one = ported.slice(gpus=2)
    with pytest.raises(ActorError) as info:
        one.refuse.call_one("refused").get(timeout=scaled(30))
    assert isinstance(info.value.exception, ValueError) and "refused" in str(info.value)
    assert one.ok.call_one().get(timeout=scaled(30)) == "alive"  # the actor survives port.exception


def test_explicit_port_broadcast_drops_replies(ported):
    ported.add.broadcast(1, 2)
    assert ported.ok.call().get(timeout=scaled(30)).values() == ["alive"] * 4


def test_explicit_port_body_raising_kills_the_actor(procs):
    doomed = procs.spawn("doomed", Ported)
    with pytest.raises(SupervisionError, match="explicit port body raised"):
        doomed.slice(gpus=3).explode.call_one().get(timeout=scaled(30))
    with pytest.raises(SupervisionError):
        doomed.slice(gpus=3).ok.call_one().get(timeout=scaled(30))
    assert doomed.slice(gpus=0).ok.call_one().get(timeout=scaled(30)) == "alive"  # only that actor died


# -- send() and Accumulator -------------------------------------------------------------------


def test_send_delivers_one_message_per_actor(senders):
    port, receiver = Channel.open_ranked()
    send(senders.rank, (), {}, port=port)
    got = sorted(receiver.recv().get(timeout=scaled(30)) for _ in range(4))
    assert got == [(0, 0), (1, 1), (2, 2), (3, 3)]
    _drain_barrier(senders)
    extra = receiver.recv()
    assert not extra.done()  # nothing more arrived
    port.send("end")
    assert extra.get(timeout=scaled(5)) == (0, "end")


def test_send_choose_delivers_exactly_one(senders):
    port, receiver = Channel.open()
    send(senders.echo, ("picked",), port=port, selection="choose")
    assert receiver.recv().get(timeout=scaled(30)) == "picked"
    _drain_barrier(senders)
    extra = receiver.recv()
    assert not extra.done()
    port.send("end")
    assert extra.get(timeout=scaled(5)) == "end"


def test_send_to_explicit_port_endpoint_and_without_a_port(senders, ported):
    port, receiver = Channel.open()
    send(ported.rank_times, (100,), port=port)
    assert sorted(receiver.recv().get(timeout=scaled(30)) for _ in range(4)) == [0, 100, 200, 300]
    send(senders.send_rank, (port,))  # no reply port: a broadcast
    assert sorted(receiver.recv().get(timeout=scaled(30)) for _ in range(4)) == [0, 1, 2, 3]


def test_send_errors_reach_the_port(procs):
    port, receiver = Channel.open()
    victim = procs.spawn("send_victim", Ported)
    send(victim.slice(gpus=0).explode, port=port)
    with pytest.raises(SupervisionError, match="explicit port body raised"):
        receiver.recv().get(timeout=scaled(30))


def test_send_rejects_bad_input(senders):
    port, _receiver = Channel.open()
    with pytest.raises(TypeError, match="@endpoint"):
        send(lambda: None, port=port)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="selection"):
        send(senders.rank, port=port, selection="some")
    with pytest.raises(TypeError, match="Port"):
        send(senders.rank, port=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lock"):
        send(senders.echo, (threading.Lock(),), port=port)


def test_accumulator_sums_over_ranks(senders):
    acc = Accumulator(senders.rank, 0, operator.add)
    assert acc.accumulate().get(timeout=scaled(30)) == 6

    async def awaited() -> int:
        return await acc.accumulate()

    assert asyncio.run(awaited()) == 6


def test_accumulator_folds_left_from_identity_and_forwards_args(ported):
    acc = Accumulator(ported.rank_times, [-1], lambda a, b: [*a, b])
    folded = acc.accumulate(k=2).get(timeout=scaled(30))
    assert folded[0] == -1 and sorted(folded[1:]) == [0, 2, 4, 6]


def test_accumulator_reports_the_first_error(procs):
    broken = procs.spawn("acc_broken", Ported)
    with pytest.raises(SupervisionError):
        Accumulator(broken.explode, 0, operator.add).accumulate().get(timeout=scaled(30))


def test_accumulator_needs_an_endpoint(senders):
    with pytest.raises(TypeError, match="@endpoint"):
        Accumulator(sum, 0, operator.add)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        Accumulator(senders.rank, 0, "add")  # type: ignore[arg-type]


def test_recv_raises_when_a_process_holding_the_port_dies():
    from port_actors import PortHolder

    pm = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        holder = pm.spawn("holder", PortHolder)
        port, receiver = Channel.open()
        holder.hold.call_one(port).get(timeout=scaled(10))
        assert receiver.recv().get(timeout=scaled(10)) == "held"
        waiting = receiver.recv()
        with pytest.raises(SupervisionError):
            holder.exit.call_one().get(timeout=scaled(10))
        with pytest.raises(SupervisionError, match=r"that held this port died .*exit code 1"):
            waiting.get(timeout=scaled(10))  # no hang: the holder's death reaches the receiver
    finally:
        pm.stop().get(timeout=scaled(30))
