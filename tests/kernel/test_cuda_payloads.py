"""CUDA tensors as arguments and results (issue 31): by CUDA IPC to a proc that sees the same GPU, else
through host memory to the receiver's GPU, else to CPU with one warning.

The GPU tests skip without a GPU; the rules that pick the path (which GPUs a process says
it sees, which peers get handles) and the CPU fallback run everywhere.
"""

from __future__ import annotations

import os
import time
import warnings

import pytest

from cuda_actors import GpuHolder
from tetrarch import this_host
from tetrarch._config import configured
from tetrarch._runtime.values import _cuda, _serial
from tetrarch._transport._auth import _INFO_MAX, PeerInfo
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(120))

MIB = 1 << 20


def _torch_with_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU visible here (torch.cuda.is_available() is False)")
    return torch


@pytest.mark.transport_independent  # environment only
@pytest.mark.parametrize(("env", "view"), [
    ({}, "F:*"),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, "F:0,1"),
    ({"CUDA_VISIBLE_DEVICES": " 2 , 3 "}, "F:2,3"),
    ({"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, "P:1"),
    ({"CUDA_VISIBLE_DEVICES": ""}, ""),
    ({"CUDA_VISIBLE_DEVICES": "MIG-GPU-5c89852c/1/0"}, ""),
    ({"HIP_VISIBLE_DEVICES": "0"}, ""),
    ({"CUDA_VISIBLE_DEVICES": ",".join(f"GPU-{i:036d}" for i in range(4))}, ""),
    ({"TETRARCH_CUDA_IPC": "0"}, ""),
])
def test_the_gpus_a_process_says_it_sees(monkeypatch, env, view):
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                 "TETRARCH_CUDA_IPC"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _cuda.gpu_view() == view
    info = PeerInfo(4194304, "f" * 24, view)
    assert len(info.encode()) <= _INFO_MAX and PeerInfo.decode(info.encode()) == info


@pytest.mark.transport_independent  # pure logic
@pytest.mark.parametrize(("mine", "peer", "index", "theirs"), [
    ("F:*", "F:0", 0, 0),  # the client sees every GPU, a proc of a gpus dimension one
    ("F:*", "F:0", 1, None),  # the tensor is on a GPU the proc does not see
    ("F:*", "F:2,3", 3, 1),
    ("F:2,3", "F:*", 1, 3),  # a proc's result to the client
    ("F:2,3", "F:3", 0, None),
    ("F:*", "P:0", 0, None),  # numbered in another order
    ("F:*", "", 0, None),  # a host agent, or IPC off there
    ("", "F:*", 0, None),
    ("F:GPU-a,GPU-b", "F:GPU-b", 1, 0),
    ("F:GPU-a,GPU-b", "F:*", 1, None),  # a UUID against an index: not comparable
])
def test_which_peer_gets_a_cuda_ipc_handle(mine, peer, index, theirs):
    assert _cuda.peer_device(mine, peer, index) == theirs


@pytest.mark.transport_independent  # serialization only: no process
def test_a_cuda_tensor_reaching_a_process_without_a_gpu_is_a_cpu_tensor_with_one_warning():
    """The receiving end of a CUDA tensor (staged through host memory) in a process that sees no GPU."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this process sees a GPU: the CPU fallback is not what it does")
    value = torch.arange(1 << 16, dtype=torch.float32)
    frames = _serial.dumps(value)
    _cuda._cpu_warned = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = _cuda.rebuild(frames[1], "float32", (1 << 16,), "GPU-test", 0)
        second = _cuda.rebuild(frames[1], "float32", (1 << 16,), "GPU-test", 0)
    said = [w for w in caught if issubclass(w.category, _serial.CudaTensorOnCpuWarning)]
    assert first.device.type == "cpu" and torch.equal(first, value) and torch.equal(second, value)
    assert len(said) == 1 and "per_host={'gpus'" in str(said[0].message)


@pytest.mark.transport_independent  # serialization only: no process
def test_a_cuda_frame_that_left_unresolved_is_an_error_not_garbage():
    pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="TETRARCH_CUDA_IPC=0"):
        _cuda.rebuild(_cuda._UNRESOLVED, "float32", (1 << 18,), "GPU-test", 0)


def test_host_agents_never_get_cuda_ipc_handles(procs):
    """A host agent forwards payloads to many procs: it advertises no GPUs, so a relayed CUDA tensor
    travels as bytes and every proc gets its own (a handle forwarded would share one reference count)."""
    mine, agent = procs.slice(gpus=0).spawn("cuda_views", GpuHolder).views.call_one().get(timeout=scaled(30))
    assert agent == ""
    if _cuda.gpu_view():  # proc 0 of a gpus dimension says it sees the first GPU the client lists
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
        assert mine == _cuda.gpu_view()[:2] + ("0" if listed is None else listed.split(",")[0].strip())


def test_cuda_tensors_as_arguments_and_results(procs):
    """A CUDA argument lands on the receiver's GPU, a CUDA result on the caller's (small and large)."""
    torch = _torch_with_gpu()
    holder = procs.slice(gpus=0).spawn("cuda_echo", GpuHolder)
    for n in (1 << 10, 16 * MIB // 4):
        value = torch.arange(n, dtype=torch.float32, device="cuda")
        back = holder.echo.call_one(value).get(timeout=scaled(60))
        assert back.device.type == "cuda" and torch.equal(back, value)


def test_a_large_cuda_argument_goes_by_ipc_and_shares_the_callers_memory(procs):
    """Same GPU: the proc gets the handle, not the bytes; its writes are the caller's (torch.multiprocessing's
    semantics). A small tensor is copied: the proc's writes stay its own."""
    torch = _torch_with_gpu()
    holder = procs.slice(gpus=0).spawn("cuda_ipc_arg", GpuHolder)
    big = torch.zeros(4 * MIB // 4, dtype=torch.float32, device="cuda")
    assert holder.fill.call_one(big, 0, 100, 7.0).get(timeout=scaled(60)) == "cuda"
    torch.cuda.synchronize()
    assert float(big[:100].sum()) == 700.0 and float(big[100:].sum()) == 0.0
    small = torch.zeros(1024, dtype=torch.float32, device="cuda")
    assert holder.fill.call_one(small, 0, 100, 7.0).get(timeout=scaled(60)) == "cuda"
    assert float(small.sum()) == 0.0


def test_a_large_cuda_result_goes_by_ipc(procs):
    """The caller's writes into a CUDA result reach the proc that made and kept it."""
    torch = _torch_with_gpu()
    holder = procs.slice(gpus=0).spawn("cuda_ipc_result", GpuHolder)
    made = holder.make.call_one(2 * MIB // 4, 1.0).get(timeout=scaled(60))
    assert made.device.type == "cuda" and float(made.sum()) == 2 * MIB // 4
    made.fill_(3.0)
    torch.cuda.synchronize()
    assert holder.kept_sum.call_one().get(timeout=scaled(60)) == 3.0 * (2 * MIB // 4)


def test_a_cuda_tensor_to_a_proc_without_that_gpu_arrives_through_host_memory(procs):
    """Proc 1 of a gpus dimension sees GPU 1, or none on a one-GPU machine: no handle, a copy of its own."""
    torch = _torch_with_gpu()
    holder = procs.slice(gpus=1).spawn("cuda_other", GpuHolder)
    value = torch.ones(4 * MIB // 4, dtype=torch.float32, device="cuda")
    where, total = holder.receive.call_one(value).get(timeout=scaled(60))
    assert where == ("cuda" if torch.cuda.device_count() > 1 else "cpu") and total == 4 * MIB // 4
    assert holder.fill.call_one(value, 0, 10, 5.0).get(timeout=scaled(60)) == where
    assert float(value.sum()) == 4 * MIB // 4  # its writes stay its own


def test_one_tensor_to_many_procs_directly_and_through_a_relay():
    """Each proc that sees the GPU gets a share of its own (direct sends) and writes the caller's memory;
    through the host's relay the tensor travels as bytes and each proc gets a copy."""
    torch = _torch_with_gpu()
    procs = this_host().spawn_procs(per_host={"procs": 3})
    try:
        holders = procs.spawn("cuda_many", GpuHolder)
        big = torch.zeros(3 * MIB, dtype=torch.float32, device="cuda")
        for rank in range(3):
            holders.slice(procs=rank).fill.call_one(big, rank * 10, rank * 10 + 10, rank + 1.0).get(
                timeout=scaled(60))
        torch.cuda.synchronize()
        assert [float(big[r * 10:r * 10 + 10].sum()) for r in range(3)] == [10.0, 20.0, 30.0]
        fresh = torch.ones(3 * MIB, dtype=torch.float32, device="cuda")
        with configured(relay_min=2):
            got = holders.receive.call(fresh).get(timeout=scaled(60))
            holders.fill.call(fresh, 0, 10, 9.0).get(timeout=scaled(60))
        assert [v for _, v in got.items()] == [("cuda", 3.0 * MIB)] * 3
        assert float(fresh[:10].sum()) == 10.0  # relayed: copies
        holders.keep.call(big).get(timeout=scaled(60))
        del big, fresh
        holders.drop.call().get(timeout=scaled(60))
    finally:
        procs.stop().get(timeout=scaled(60))


def test_a_cuda_tensor_received_by_ipc_can_be_passed_on():
    """A proc passes on the tensor it opened by handle (torch may refuse to share it again: then bytes)."""
    torch = _torch_with_gpu()
    procs = this_host().spawn_procs(per_host={"procs": 2})
    try:
        holders = procs.spawn("cuda_pass", GpuHolder)
        value = torch.full((4 * MIB // 4,), 2.0, dtype=torch.float32, device="cuda")
        got = holders.slice(procs=0).pass_on.call_one(value, holders.slice(procs=1)).get(timeout=scaled(60))
        assert got == ("cuda", 2.0 * (4 * MIB // 4))
    finally:
        procs.stop().get(timeout=scaled(60))


def test_the_callers_gpu_memory_is_freed_once_the_receiver_drops_it(procs):
    """A shared block outlives the caller's tensor while the proc keeps it, and no longer."""
    torch = _torch_with_gpu()
    holder = procs.slice(gpus=0).spawn("cuda_free", GpuHolder)
    value = torch.ones(64 * MIB // 4, dtype=torch.float32, device="cuda")
    assert holder.keep.call_one(value).get(timeout=scaled(60)) == 1
    del value
    torch.cuda.ipc_collect()
    held = torch.cuda.memory_allocated()
    assert held >= 64 * MIB  # the proc holds it
    holder.drop.call_one().get(timeout=scaled(60))
    deadline = time.monotonic() + scaled(30)
    while torch.cuda.memory_allocated() > held - 64 * MIB and time.monotonic() < deadline:
        torch.cuda.ipc_collect()  # the limbo is swept when asked (or when the allocator needs memory)
        time.sleep(0.05)
    assert torch.cuda.memory_allocated() <= held - 64 * MIB


@pytest.mark.transport_independent  # files only
def test_what_cuda_ipc_leaves_in_dev_shm_for_an_ended_process_is_removed(tmp_path, monkeypatch):
    """The driver's event files and torch's counter files of an ended producer; nobody else's."""
    monkeypatch.setattr(_cuda, "_SHM", str(tmp_path))
    names = ["cuda.shm.0.1ef.1", "cuda.shm.0.1ef.2", "torch_495_1218533095_1", "cuda.shm.0.1f0.1",
             "torch_4950_1_1", "tetrarch-x", "cuda.shm.0.1ef"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert sorted(_cuda.litter(0x1EF)) == ["cuda.shm.0.1ef.1", "cuda.shm.0.1ef.2", "torch_495_1218533095_1"]
    assert _cuda.remove_litter(0x1EF, torch_files=False) == 2
    assert _cuda.remove_litter(0x1EF) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[3:])
