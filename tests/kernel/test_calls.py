"""Spawning and calling actors on real OS processes: adverbs, ValueMesh, ranks, env."""

from __future__ import annotations

import os

import pytest

from kernel_actors import AsyncGreeter, Counter, Info
from tetrarch import Future, ValueMesh, this_host, this_proc
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))


def test_broadcast_call_and_call_one_on_a_slice(procs):
    counters = procs.spawn("counters", Counter, 5)
    counters.incr.broadcast()
    counters.slice(gpus=slice(2, 4)).incr.broadcast(10)
    values = counters.value.call().get()
    assert isinstance(values, ValueMesh)
    assert values.values() == [6, 6, 16, 16]
    assert counters.slice(gpus=3).value.call_one().get() == 16
    assert len(values) == 4 and values.item(gpus=2) == 16
    assert [dict(p) for p, _ in values.items()] == [{"gpus": i} for i in range(4)]


def test_actors_run_in_distinct_os_processes(procs):
    pids = procs.spawn("info", Info).pid.call().get().values()
    assert len(set(pids)) == 4 and os.getpid() not in pids


def test_rank_environment_and_cuda_visible_devices(procs):
    info = procs.spawn("env", Info)
    assert info.env.call("CUDA_VISIBLE_DEVICES").get().values() == ["0", "1", "2", "3"]
    assert info.env.call("RANK").get().values() == ["0", "1", "2", "3"]
    assert info.env.call("WORLD_SIZE").get().values() == ["4"] * 4
    assert info.env.call("TETRARCH_RANK_GPUS").get().values() == ["0", "1", "2", "3"]
    assert info.env.call("TETRARCH_SECRET").get().values() == [None] * 4, "the secret must not reach user code"
    assert info.env.call("TETRARCH_SECRET_FD").get().values() == [None] * 4, "read once at start"


def test_current_rank_and_size_follow_the_message_slice(procs):
    info = procs.spawn("ranks", Info)
    full = info.rank.call().get().values()
    assert full[3] == ({"gpus": 3}, {"gpus": 4}, 3)
    sliced = info.slice(gpus=slice(2, 4)).rank.call().get().values()
    assert sliced == [({"gpus": 0}, {"gpus": 2}, 2), ({"gpus": 1}, {"gpus": 2}, 3)]


def test_async_actor(procs):
    greeters = procs.spawn("greeters", AsyncGreeter, "hi")
    assert greeters.greet.call("you").get().values() == ["hi, you"] * 4
    assert greeters.slice(gpus=0).loop_is_visible.call_one().get() is True


def test_sync_endpoints_run_on_the_actor_thread_not_the_io_thread(procs):
    names = procs.spawn("threads", Info).thread_name.call().get().values()
    assert all(n.startswith("tetrarch-actor-") for n in names)


def test_arguments_and_results_round_trip(procs):
    echo = procs.spawn("echo", Info).slice(gpus=1).echo
    payload = {"bytes": b"\x00" * 100_000, "nested": [1, (2.5, "x")], "none": None}
    assert echo.call_one(payload).get() == payload


@pytest.mark.slow  # importing torch, here and in the proc
def test_torch_tensors_travel(procs):
    torch = pytest.importorskip("torch")
    t = torch.arange(1 << 16, dtype=torch.float32).reshape(256, 256)
    out = procs.spawn("tensors", Info).slice(gpus=0).echo.call_one(t).get()
    assert torch.equal(out, t) and out.dtype == t.dtype


def test_future_get_timeout_does_not_consume(procs):
    fut = procs.spawn("slowish", AsyncGreeter, "yo").slice(gpus=0).greet.call_one("a")
    assert isinstance(fut, Future)
    assert fut.get(timeout=scaled(30)) == "yo, a"
    assert fut.get() == "yo, a"  # cached, re-readable


def test_await_from_asyncio(procs):
    import asyncio

    counters = procs.spawn("awaited", Counter, 1)

    async def main() -> int:
        return await counters.slice(gpus=0).value.call_one()

    assert asyncio.run(main()) == 1


def test_this_proc_runs_actors_in_the_client_process():
    info = this_proc().spawn("local", Info)
    assert info.pid.call_one().get() == os.getpid()


def test_pipelined_calls_keep_order(procs):
    counter = procs.spawn("ordered", Counter, 0).slice(gpus=1)
    futures = []
    for _i in range(500):
        counter.incr.broadcast()
        futures.append(counter.value.call_one())
    assert [f.get() for f in futures] == list(range(1, 501))


def test_actor_mesh_passed_to_an_actor_on_another_proc_mesh(procs):
    from kernel_actors import MeshUser

    counters = procs.spawn("shared_counters", Counter, 1)
    other = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        user = other.spawn("user", MeshUser)
        assert user.bump_and_read.call_one(counters).get(timeout=scaled(30)) == [6, 6, 6, 6]
        assert counters.value.call().get().values() == [6, 6, 6, 6]  # same actors, seen from the client
    finally:
        other.stop().get(timeout=scaled(30))
