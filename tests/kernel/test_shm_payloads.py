"""Large arguments and results between processes of one host travel through shared memory (issue 31).

What a user relies on: every dtype and shape arrives intact, as an array or tensor of its
own that may be kept and written; the sender's later writes do not reach it; segments are
reused when receivers drop what they got and taken back when a receiver dies; a full pool
or a segment that is gone never loses a message or hangs a call.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import warnings
import zlib

import numpy as np
import pytest

from shm_actors import Keeper, describe
from tetrarch import Channel, SupervisionError, this_host
from tetrarch._config import configured
from tetrarch._runtime.plumbing import _segments, _shm_wire
from tetrarch._runtime.values import _serial
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(120))

MIB = 1 << 20
#: Where a large array received over the socket lives: the builtin transport receives it into the
#: receiver's pool (receive sinks); pyzmq and pynng hand over memory of their own.
SOCKET_ORIGIN = "pool" if (os.environ.get("TETRARCH_TRANSPORT") or "ipc") in ("ipc", "tcp") else "private"


@pytest.fixture(scope="module")
def keeper(procs):
    return procs.slice(gpus=0).spawn("shm_keeper", Keeper)


def _crc(value) -> int:
    return describe(value)[3]


NUMPY_CASES = {
    "float32-1d": lambda: np.arange(1 << 20, dtype=np.float32),
    "float64-3d": lambda: np.arange(1 << 18, dtype=np.float64).reshape(64, 64, 64),
    "int8": lambda: (np.arange(3 << 20) % 127).astype(np.int8),
    "uint16-fortran": lambda: np.asfortranarray(np.arange(1 << 20, dtype=np.uint16).reshape(1024, 1024)),
    "bool": lambda: np.arange(2 << 20) % 3 == 0,
    "complex64": lambda: np.arange(1 << 18, dtype=np.complex64) * (1 + 2j),
    "non-contiguous": lambda: np.arange(4 << 20, dtype=np.int32).reshape(2048, 2048)[::2, 1::3],
    "structured": lambda: np.zeros(1 << 16, dtype=[("a", "<i4"), ("b", "<f8")]),
}


@pytest.mark.parametrize("case", list(NUMPY_CASES))
def test_numpy_arguments_arrive_intact_through_shared_memory(keeper, case):
    value = NUMPY_CASES[case]()
    origin, dtype, shape, crc, writable = keeper.describe.call_one(value).get(timeout=scaled(30))
    assert (dtype, shape, crc) == (value.dtype.str, value.shape, _crc(value))
    assert writable
    assert origin == "shm", f"a {value.nbytes >> 10} KiB {case} argument went through the socket"


@pytest.mark.parametrize("case", ["float32", "bfloat16", "int64", "bool", "transposed", "sliced"])
def test_torch_arguments_and_results_arrive_intact(keeper, case):
    torch = pytest.importorskip("torch")
    base = torch.arange(1 << 20)
    value = {
        "float32": lambda: base.float(),
        "bfloat16": lambda: base.to(torch.bfloat16),
        "int64": lambda: base.clone(),
        "bool": lambda: base % 3 == 0,
        "transposed": lambda: base.float().reshape(1024, 1024).t(),
        "sliced": lambda: base.float().reshape(1024, 1024)[1::2, ::4],
    }[case]()
    origin, dtype, shape, crc, _ = keeper.describe.call_one(value).get(timeout=scaled(30))
    assert (dtype, shape, crc) == (str(value.dtype), tuple(value.shape), _crc(value)) and origin == "shm"
    back = keeper.echo.call_one(value).get(timeout=scaled(30))
    assert back.dtype == value.dtype and back.shape == value.shape and torch.equal(back, value.contiguous())
    assert _shm_wire.payload_origin(back) == "shm", "a result went through the socket"
    back.view(-1)[0] = back.view(-1)[1]  # the caller's own, writable
    assert back.view(-1)[0] == back.view(-1)[1]


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_results_come_back_through_shared_memory_and_are_the_callers_own(keeper, kind):
    if kind == "torch":
        pytest.importorskip("torch")
    first = keeper.make.call_one(kind, 4 * MIB // 4, 7).get(timeout=scaled(30))
    second = keeper.make.call_one(kind, 4 * MIB // 4, 9).get(timeout=scaled(30))
    assert _shm_wire.payload_origin(first) == "shm" and _shm_wire.payload_origin(second) == "shm"
    first[0] = 100  # kept and written while the next results arrive: the segment stays this caller's
    third = keeper.make.call_one(kind, 4 * MIB // 4, 11).get(timeout=scaled(30))
    assert int(first[0]) == 100 and int(first[1:].sum()) == 7 * (MIB - 1) and int(second.sum()) == 9 * MIB
    assert int(third.sum()) == 11 * MIB


def test_a_receiver_writes_its_copy_and_the_senders_later_writes_do_not_reach_it(keeper):
    value = np.ones(1 << 20, dtype=np.float32)
    assert keeper.write_and_sum.call_one(value).get(timeout=scaled(30)) == 2.0 * value.size
    assert float(value.sum()) == value.size, "the receiver's writes reached the sender"
    keeper.drop.call_one().get(timeout=scaled(30))
    crc = _crc(value)
    keeper.keep.call_one(value).get(timeout=scaled(30))
    value[:] = 5  # after the call returned
    assert keeper.kept_crcs.call_one().get(timeout=scaled(30)) == [crc]
    keeper.drop.call_one().get(timeout=scaled(30))


def test_small_payloads_stay_on_the_socket_and_the_path_can_be_turned_off(keeper):
    small = np.ones(1024, dtype=np.float32)
    assert keeper.describe.call_one(small).get(timeout=scaled(30))[0] == "private"
    big = np.ones(1 << 20, dtype=np.float32)
    with configured(shm_payloads=False):  # the socket, received into the receiver's pool
        assert keeper.describe.call_one(big).get(timeout=scaled(30))[0] == SOCKET_ORIGIN
    with configured(shm_min_bytes=8 * MIB):
        assert keeper.describe.call_one(big).get(timeout=scaled(30))[0] == SOCKET_ORIGIN


def test_many_buffers_of_one_message_share_a_segment(keeper):
    """A state dict of many middling tensors: each too small alone, together over the threshold."""
    state = {f"layer{i}": np.full(8192, i, dtype=np.float32) for i in range(64)}  # 32 KiB each, 2 MiB in all
    got = keeper.describe_all.call_one(state).get(timeout=scaled(30))
    assert {k: v[3] for k, v in got.items()} == {k: _crc(v) for k, v in state.items()}
    assert {v[0] for v in got.values()} == {"shm"}


def test_many_concurrent_large_calls(procs):
    mesh = procs.spawn("shm_concurrent", Keeper)
    values = [np.full(2 * MIB, i, dtype=np.int32) for i in range(6)]
    futures = [mesh.describe.call(v) for v in values]
    for value, future in zip(values, futures, strict=True):
        for origin, _, shape, crc, _ in future.get(timeout=scaled(60)).values():
            assert (origin, shape, crc) == ("shm", value.shape, _crc(value))


def test_segments_are_reused_once_receivers_drop_what_they_hold(keeper):
    _segments.release_all_for_tests()  # segments of earlier tests would serve these payloads too
    pool = _segments.pool()
    value = np.ones(4 * MIB, dtype=np.uint8)
    for _ in range(20):
        keeper.describe.call_one(value).get(timeout=scaled(30))
    # The receiver drops each payload once its reply is out; the next call may come first, so a
    # few segments take turns: never one per call.
    assert pool.nbytes <= 3 * 4 * MIB, f"20 payloads that were dropped took {pool.nbytes >> 20} MiB of segments"
    for _ in range(4):  # kept: each keeps its segment
        keeper.keep.call_one(value).get(timeout=scaled(30))
    assert pool.nbytes >= 4 * 4 * MIB, "each kept payload holds a segment of its own"
    keeper.drop.call_one().get(timeout=scaled(30))
    grown = pool.nbytes
    for _ in range(10):
        keeper.describe.call_one(value).get(timeout=scaled(30))
    assert pool.nbytes == grown, "segments freed by the receiver were not reused"


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_what_a_proc_received_is_passed_on_without_a_copy(procs, kind):
    """An array that came through a segment goes on to a third process by reference: the forwarder's
    pool stays empty, and the two share the memory (as for any tensor already in shared memory)."""
    a, b = (procs.slice(gpus=g).spawn(f"shm_fwd_{g}", Keeper) for g in (2, 3))
    b.drop.call_one().get(timeout=scaled(30))
    value = np.arange(4 * MIB // 4, dtype=np.int32)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        value = torch.from_numpy(value)
    origin, pool_bytes = a.pass_on.call_one(value, b, True).get(timeout=scaled(30))
    assert origin == "shm" and pool_bytes == 0, (origin, pool_bytes)
    assert b.kept_crcs.call_one().get(timeout=scaled(30)) == [_crc(value)]
    a.fill_kept.call_one(5).get(timeout=scaled(30))  # the forwarder writes: the receiver sees it
    assert b.kept_crcs.call_one().get(timeout=scaled(30)) == [_crc(np.full(4 * MIB // 4, 5, dtype=np.int32))]
    a.drop.call_one().get(timeout=scaled(30))
    b.drop.call_one().get(timeout=scaled(30))


def test_a_relayed_broadcast_gives_every_proc_a_copy_of_its_own():
    """A host agent relays a call to its procs: what it received is copied for each, never passed on
    by reference, so a proc that writes into its argument changes no other proc's."""
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    try:
        keepers = procs.spawn("shm_relayed", Keeper)
        value = np.zeros(4 * MIB // 4, dtype=np.int32)
        with configured(relay_min=2):
            keepers.keep.call(value).get(timeout=scaled(30))
        for rank in range(3):
            keepers.slice(gpus=rank).fill_kept.call_one(rank + 1).get(timeout=scaled(30))
        crcs = [crcs[0] for _, crcs in keepers.kept_crcs.call().get(timeout=scaled(30)).items()]
        assert crcs == [_crc(np.full(4 * MIB // 4, r + 1, dtype=np.int32)) for r in range(3)]
    finally:
        procs.stop().get(timeout=scaled(30))


def test_a_passed_on_array_outlives_the_forwarder_letting_go():
    """The forwarder drops its copy at once; the segment stays held for the receiver, so later payloads
    of the original sender never land in it; once the receiver drops it, the segment is reused."""
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        a, b = procs.slice(gpus=0).spawn("shm_fwd_a", Keeper), procs.slice(gpus=1).spawn("shm_fwd_b", Keeper)
        _segments.release_all_for_tests()
        pool = _segments.pool()
        first = np.full(4 * MIB, 1, dtype=np.uint8)
        a.pass_on.call_one(first, b, False).get(timeout=scaled(30))
        for fill in range(2, 8):  # new payloads: the first segment is b's, each of these takes another
            a.describe.call_one(np.full(4 * MIB, fill, dtype=np.uint8)).get(timeout=scaled(30))
        assert b.kept_crcs.call_one().get(timeout=scaled(30)) == [_crc(first)]
        b.die.broadcast()  # its lock goes with it
        with pytest.raises(SupervisionError):
            b.pid.call_one().get(timeout=scaled(30))
        deadline = time.monotonic() + scaled(30)  # a drops the last payload just after its reply
        while any(seg.reclaim() != _segments.FREE for seg in pool._segments) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(seg.reclaim() == _segments.FREE for seg in pool._segments), "a segment stayed held"
    finally:
        procs.stop().get(timeout=scaled(30))


def test_an_echoed_array_comes_back_without_a_copy(keeper):
    """``echo`` returns what it received: the reply names the caller's own segment, the actor copies
    nothing, and the segment is the caller's again once the result is dropped."""
    _segments.release_all_for_tests()
    pool = _segments.pool()
    before = keeper.pool_bytes.call_one().get(timeout=scaled(30))
    value = np.arange(4 * MIB // 4, dtype=np.int32)
    for _ in range(5):
        back = keeper.echo.call_one(value).get(timeout=scaled(30))
        assert _crc(back) == _crc(value) and back.flags.writeable
        del back
    assert keeper.pool_bytes.call_one().get(timeout=scaled(30)) == before, "the actor copied the echoes"
    assert pool.nbytes <= 3 * 4 * MIB, f"5 echoes took {pool.nbytes >> 20} MiB of segments"


def test_a_full_pool_sends_through_the_socket_with_one_warning(keeper):
    _segments.release_all_for_tests()
    value = np.arange(8 * MIB // 4, dtype=np.int32)
    with configured(shm_pool_bytes=4 * MIB), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            origin, _, _, crc, _ = keeper.describe.call_one(value).get(timeout=scaled(30))
            assert origin == SOCKET_ORIGIN and crc == _crc(value)  # the socket (into the receiver's pool)
    said = [w for w in caught if issubclass(w.category, _segments.ShmWarning)]
    assert len(said) == 1 and "TETRARCH_SHM_POOL_BYTES" in str(said[0].message), [str(w.message) for w in caught]
    _segments.release_all_for_tests()


def test_a_dead_receivers_segments_are_taken_back():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        victim = procs.spawn("shm_victim", Keeper)
        _segments.release_all_for_tests()
        pool = _segments.pool()
        value = np.ones(4 * MIB, dtype=np.uint8)
        for _ in range(3):
            victim.keep.call_one(value).get(timeout=scaled(30))
        held = pool.nbytes
        assert held >= 3 * 4 * MIB
        victim.die.broadcast()
        with pytest.raises(SupervisionError):
            victim.pid.call_one().get(timeout=scaled(30))
    finally:
        procs.stop().get(timeout=scaled(30))
    other = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        again = other.spawn("shm_after", Keeper)
        for _ in range(3):
            again.keep.call_one(value).get(timeout=scaled(30))
        assert pool.nbytes == held, "the dead receiver's segments were not reused"
    finally:
        other.stop().get(timeout=scaled(30))


def test_a_payload_whose_segment_is_gone_fails_the_receiver_with_why(keeper):
    channel = Channel.open()
    port, receiver = channel
    keeper.send_unreadable.call_one(port, os.getpid()).get(timeout=scaled(30))
    with pytest.raises(SupervisionError, match="shared memory"):
        receiver.recv().get(timeout=scaled(30))


def test_a_segment_of_a_sender_that_ended_is_unreadable_not_torn():
    """The sender writes the whole payload before the message leaves; if it then ends, the receiver says so."""
    code = (
        "import os, sys, numpy as np\n"
        "from tetrarch._runtime.plumbing import _shm_wire\n"
        "from tetrarch._runtime.values import _serial, _wire\n"
        "frames = [_wire.port_header(1, 0, 0), *_serial.dumps(np.ones(1 << 20, np.float32))]\n"
        "frames = _shm_wire.outgoing(frames, int(sys.argv[1]))\n"
        "sys.stdout.write(bytes(frames[0]).hex())\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(os.getpid())], capture_output=True, text=True,
                         timeout=scaled(60), check=True)
    head = bytes.fromhex(out.stdout)
    assert head.startswith(_shm_wire.MARK), "the sender did not use shared memory"
    with pytest.raises(_shm_wire.Unreadable, match="ended"):
        _shm_wire.incoming([head, b"", b""])


def test_serialization_places_noncontiguous_arrays_out_of_band_once():
    value = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)[:, ::2]
    stream, *buffers = _serial.dumps(value)
    assert len(stream) < 1024 and len(buffers) == 1, "a non-contiguous array must travel as one contiguous buffer"
    assert np.array_equal(_serial.loads([stream, *buffers]), value)


def test_nothing_is_left_in_dev_shm(keeper):
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    keeper.describe.call_one(np.ones(4 * MIB, np.uint8)).get(timeout=scaled(30))
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert after <= before, f"new files in /dev/shm: {sorted(after - before)}"
    assert zlib.crc32(b"") == 0


def test_a_tensor_already_in_shared_memory_is_shared_not_copied(procs):
    """As with torch.multiprocessing: the receiver maps the sender's own memory, and writes are seen by both."""
    torch = pytest.importorskip("torch")
    from shm_actors import Sharer

    sharer = procs.slice(gpus=1).spawn("shm_sharer", Sharer)
    value = torch.zeros(1 << 20)
    value.share_memory_()
    assert sharer.fill.call_one(value, 3.0).get(timeout=scaled(30)) == "shared"
    assert float(value.sum()) == 3.0 * value.numel(), "the receiver's writes to a shared tensor were not seen"
    assert _segments.tickets().held == 0, "the receiver did not say it mapped the file"
    view = value[1024:]  # a view at an offset of the shared storage
    assert sharer.fill.call_one(view, 5.0).get(timeout=scaled(30)) == "shared"
    assert float(value[:1024].sum()) == 3.0 * 1024 and float(view.sum()) == 5.0 * view.numel()


def test_a_shared_tensor_dropped_by_the_sender_right_after_the_call_still_arrives(procs):
    torch = pytest.importorskip("torch")
    from shm_actors import Keeper

    keeper = procs.slice(gpus=1).spawn("shm_dropped", Keeper)
    futures = []
    for i in range(8):
        value = torch.full((1 << 18,), float(i))
        value.share_memory_()
        futures.append(keeper.describe.call_one(value))
        del value  # the sender's tensor, and its file, would close now but for the ticket
    for i, future in enumerate(futures):
        origin, _, _, crc, _ = future.get(timeout=scaled(30))
        assert origin == "shared" and crc == _crc(torch.full((1 << 18,), float(i)))


def test_between_hosts_large_arrays_are_received_into_reused_memory(keeper):
    """The socket path (shared memory off stands in for another host): the receiver's pool takes the frames."""
    if SOCKET_ORIGIN != "pool":
        pytest.skip("this transport offers no receive sinks: its library hands over memory of its own")
    value = np.arange(4 * MIB // 4, dtype=np.int32)
    with configured(shm_payloads=False):
        origin, _, _, crc, writable = keeper.describe.call_one(value).get(timeout=scaled(30))
        assert (origin, crc, writable) == (SOCKET_ORIGIN, _crc(value), True)
        small = np.arange(64 << 10, dtype=np.uint8)  # under a MiB: a buffer of its own
        assert keeper.describe.call_one(small).get(timeout=scaled(30))[0] == "private"


def test_between_hosts_results_are_received_into_the_callers_pool():
    if SOCKET_ORIGIN != "pool":
        pytest.skip("this transport offers no receive sinks: its library hands over memory of its own")
    with configured(shm_payloads=False):
        procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        keeper = procs.spawn("shm_remote_like", Keeper)
        with configured(shm_payloads=False):
            got = [keeper.make.call_one("numpy", MIB, i).get(timeout=scaled(30)) for i in range(4)]
        assert [_shm_wire.payload_origin(g) for g in got] == ["pool"] * 4
        assert [int(g[-1]) for g in got] == [0, 1, 2, 3]
        held = _segments.pool().nbytes
        del got
        with configured(shm_payloads=False):
            for i in range(8):
                assert int(keeper.make.call_one("numpy", MIB, i).get(timeout=scaled(30))[0]) == i
        assert _segments.pool().nbytes == held, "receive buffers were not reused"
    finally:
        procs.stop().get(timeout=scaled(30))


def test_a_sender_killed_around_its_write_gives_a_supervision_error_or_the_whole_result():
    """The copy into the segment ends before the message leaves: a caller never sees a torn result."""
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        from shm_actors import Dier

        dier = procs.spawn("shm_dier", Dier)
        dier.pid.call_one().get(timeout=scaled(30))
        port, started = Channel.open()
        n = 64 * MIB // 8
        pending = dier.big.call_one(port, n)
        os.kill(started.recv().get(timeout=scaled(30)), 9)
        try:
            got = pending.get(timeout=scaled(30))
        except SupervisionError:
            return
        assert got.shape == (n,) and int(got.min()) == 7 == int(got.max()), "a torn result"
    finally:
        procs.stop().get(timeout=scaled(30))


def test_a_read_only_dev_shm_does_not_matter(tmp_path):
    """Segments are anonymous memfds: /dev/shm is neither used nor needed."""
    script = os.path.join(os.path.dirname(__file__), "scenarios", "shm_readonly_devshm.py")
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here to make a private read-only /dev/shm")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o ro,size=1m tmpfs /dev/shm"], capture_output=True, text=True,
                           timeout=scaled(30))
    if probe.returncode:
        pytest.skip(f"cannot make a private read-only /dev/shm here (unshare -m: {probe.stderr.strip()})")
    run = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                          f"mount -t tmpfs -o ro,size=1m tmpfs /dev/shm && exec {sys.executable} {script}"],
                         capture_output=True, text=True, timeout=scaled(120))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK shm" in run.stdout, run.stdout + run.stderr
