"""CUDA tensors as arguments and results: by CUDA IPC to a process that sees the same GPU, else through host memory.

Pickling a CUDA tensor of at least :data:`IPC_MIN` bytes (``_serial``) copies nothing: the
stream names :func:`rebuild` and one out-of-band frame, a :class:`Pending` placeholder that
holds the tensor. The router then resolves the placeholder per receiver (:func:`resolve`,
from ``_shm_wire.prepare``), once it knows who that is:

* a process of this host (same ``host_key``) that sees the tensor's GPU and opens CUDA
  handles (its handshake's ``gpus`` view, :func:`gpu_view`; a host agent, which only
  forwards, advertises none): the frame becomes a small descriptor, the tensor's CUDA IPC
  handle, as with ``torch.multiprocessing``. Every receiver gets a share of its own
  (``_share_cuda_``: a reference counter each), so the sender's memory lives until the
  last receiver's tensor dies. The receiver's tensor is the sender's memory: writes are
  seen on both sides, the semantics of ``torch.multiprocessing``.
* anyone else: the frame becomes the tensor's bytes, copied once into pinned host memory
  (the copy is made once per message, whatever the number of receivers); the receiver
  copies them to the same physical GPU when it sees it (matched by UUID), else to its
  current GPU, else keeps a CPU tensor and warns once (:class:`CudaTensorOnCpuWarning`).

A placeholder unpickled in its own process (a call to an actor of the same process) gives
a copy of the tensor; one that reached another process unresolved is an error, never a
tensor of garbage. Smaller tensors are copied to host memory at once, as the bytes case.

``TETRARCH_CUDA_IPC=0`` turns the IPC path off (every CUDA tensor through host memory).
"""

from __future__ import annotations

import atexit
import math
import mmap
import os
import pickle
import threading
import warnings
from collections.abc import Callable
from typing import Any

from ... import _config
from ._buffers import tensor_bytes, tensor_over

__all__ = ["IPC_MIN", "CudaTensorOnCpuWarning", "Pending", "gpu_view", "has_pending", "litter", "peer_device",
           "rebuild", "reduce", "remove_litter", "resolve"]

#: CUDA tensors from this size on are sent by handle (or copied lazily); smaller ones are copied at once.
IPC_MIN = 1 << 20
_DESCRIPTOR = b"TETRARCH-CUDA-IPC/1\0"
_UNRESOLVED = b"TETRARCH-CUDA-UNRESOLVED"
#: Longest ``gpus`` view a handshake carries (the whole self-description is bounded, see ``_auth``).
_VIEW_MAX = 80


class CudaTensorOnCpuWarning(UserWarning):
    """A CUDA tensor reached a process that sees no GPU: it is a CPU tensor there."""


_cpu_warned = False


def gpu_view() -> str:
    """What this process says of its GPUs in handshakes: ``"<order>:<devices>"``, or ``""`` for none.

    ``<devices>`` is ``CUDA_VISIBLE_DEVICES`` as listed (``*`` when unset: all of them);
    ``<order>`` is ``P`` under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, else ``F``. Read from the
    environment alone (no CUDA initialisation). ``""`` where a device list cannot be
    compared across processes (MIG instances, HIP/ROCR lists, too long) or IPC is off.
    """
    if not _config.CUDA_IPC():
        return ""
    if os.environ.get("HIP_VISIBLE_DEVICES") is not None or os.environ.get("ROCR_VISIBLE_DEVICES") is not None:
        return ""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = "*" if visible is None else ",".join(d.strip() for d in visible.split(",") if d.strip())
    if not devices or "/" in devices or "MIG" in devices or len(devices) > _VIEW_MAX:
        return ""
    order = "P" if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" else "F"
    return f"{order}:{devices}"


def peer_device(mine: str, peer: str, index: int) -> int | None:
    """The peer's index of this process's GPU ``index``, given both :func:`gpu_view` values; None where the
    peer does not see it or the views cannot be compared."""
    if not mine or not peer or mine[:2] != peer[:2]:
        return None
    ours, theirs = mine[2:], peer[2:]
    if ours == "*":
        physical = str(index)
    else:
        listed = ours.split(",")
        if index >= len(listed):
            return None
        physical = listed[index]
    if theirs == "*":
        return int(physical) if physical.isdigit() else None
    listed = theirs.split(",")
    return listed.index(physical) if physical in listed else None


class Pending(bytearray):
    """The out-of-band frame of a CUDA tensor until the router knows its receiver (:func:`resolve`)."""

    def __init__(self, tensor: Any, event: Any) -> None:
        super().__init__(_UNRESOLVED)
        self.tensor = tensor
        self.event = event  # recorded on the producer's stream when pickled
        self.lock = threading.Lock()
        self.host: memoryview | None = None

    def host_bytes(self, stage: Callable[[Pending], memoryview | None] | None = None) -> memoryview:
        """The tensor's bytes in host memory, copied once on the first call: into the memory ``stage``
        gives (a shared-memory segment registered with CUDA, for a receiver of this host), else into
        pinned memory of torch's."""
        with self.lock:
            if self.host is None:
                import torch

                with torch.cuda.device(self.tensor.device):
                    torch.cuda.current_stream().wait_event(self.event)
                    staged = stage(self) if stage is not None else None
                    self.host = staged if staged is not None else _host_copy(torch, self.tensor)
            return self.host

    def copy_into(self, view: memoryview) -> None:
        """Copy the tensor's bytes into ``view`` (host memory of exactly its size; waits for the copy).

        Raises:
            RuntimeError: torch failed the copy.
        """
        import torch

        src = self.tensor.contiguous().view(-1).view(torch.uint8)
        torch.frombuffer(view, dtype=torch.uint8).copy_(src)

    def descriptor(self, device: int) -> bytes | None:
        """A share of the tensor for one receiver whose index of its GPU is ``device``; None where CUDA
        refuses one (memory not from torch's caching allocator, say)."""
        import torch

        t = self.tensor
        try:
            with torch.cuda.device(t.device):
                torch.cuda.current_stream().wait_event(self.event)
                share = t.untyped_storage()._share_cuda_()
        except (RuntimeError, AttributeError):
            return None
        _sharing()
        (_, handle, size_bytes, offset_bytes, counter, counter_offset, event_handle, event_sync) = share
        return _DESCRIPTOR + pickle.dumps((device, tuple(t.shape), t.stride(), t.storage_offset(),
                                           str(t.dtype).removeprefix("torch."), handle, size_bytes, offset_bytes,
                                           counter, counter_offset, event_handle, event_sync), 5)


_SHM = "/dev/shm"
_shared_once = False


def litter(pid: int) -> list[str]:
    """What CUDA IPC leaves in ``/dev/shm`` for a producer ``pid`` that is gone: the driver's IPC event
    files (``cuda.shm.<n>.<pid in hex>.<n>``, never removed by it) and torch's reference-counter files
    (``torch_<pid>_...``, left by a process that ends without torch's exit handlers)."""
    try:
        names = os.listdir(_SHM)
    except OSError:
        return []
    hexpid, prefix = f"{pid:x}", f"torch_{pid}_"
    out = []
    for name in names:
        parts = name.split(".")
        if (len(parts) == 5 and parts[:2] == ["cuda", "shm"] and parts[3] == hexpid) or name.startswith(prefix):
            out.append(name)
    return out


def remove_litter(pid: int, torch_files: bool = True) -> int:
    """Remove :func:`litter` of ``pid`` (the host agent, once its proc ended); how many went. Never raises.

    Mappings of those files that other processes hold stay valid: only the names go.
    """
    gone = 0
    for name in litter(pid):
        if not torch_files and name.startswith("torch_"):
            continue
        try:
            os.unlink(os.path.join(_SHM, name))
            gone += 1
        except OSError:
            pass
    return gone


def _sharing() -> None:
    """This process sends CUDA IPC handles: at its exit, the driver's event files of it go too (torch
    removes its own counter files at a normal exit, and would fail removing them twice)."""
    global _shared_once
    if not _shared_once:
        _shared_once = True
        atexit.register(remove_litter, os.getpid(), False)


def _host_copy(torch: Any, t: Any) -> memoryview:
    try:
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)  # torch's caching host allocator: reused
        host.copy_(t)
    except RuntimeError:  # no pinned memory to be had: pageable
        host = t.cpu()
    return tensor_bytes(host.contiguous())


def _uuid(torch: Any, t: Any) -> str:
    try:
        return str(torch.cuda.get_device_properties(t.device).uuid)
    except (RuntimeError, AttributeError):
        return ""


def reduce(t: Any) -> Any:
    """The pickle reduction of a CUDA tensor (dense, no autograd history)."""
    import torch

    t = t.detach()
    index = t.device.index or 0
    if t.nbytes >= IPC_MIN:
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(t.device))
        frame: Any = Pending(t, event)
    else:
        with torch.cuda.device(t.device):
            frame = _host_copy(torch, t)
    return (rebuild, (pickle.PickleBuffer(frame), str(t.dtype).removeprefix("torch."), tuple(t.shape), _uuid(torch, t),
                      index))


def _pending_of(frame: Any) -> Pending | None:
    """The placeholder a frame views (a memoryview's ``obj`` is its exporter, however many views deep)."""
    obj = frame.obj if type(frame) is memoryview else frame
    return obj if type(obj) is Pending else None


def has_pending(frames: list) -> bool:
    """Whether any out-of-band frame of ``frames`` is a CUDA tensor to resolve."""
    return any(_pending_of(f) is not None for f in frames[2:])


def resolve(frames: list, mine: str, peer: str | None,
            stage: Callable[[Pending], memoryview | None] | None = None) -> list:
    """``frames`` with their CUDA placeholders resolved for one receiver: IPC descriptors when ``peer`` (its
    :func:`gpu_view`, None when it is on another host) sees the tensor's GPU, else host bytes (staged by
    ``stage`` where it can, see :meth:`Pending.host_bytes`)."""
    out = list(frames)
    for i in range(2, len(out)):
        pending = _pending_of(out[i])
        if pending is None:
            continue
        resolved: Any = None
        if peer:
            device = peer_device(mine, peer, pending.tensor.device.index or 0)
            if device is not None:
                resolved = pending.descriptor(device)
        out[i] = resolved if resolved is not None else pending.host_bytes(stage)
    return out


def _on_cpu(host: Any, uuid: str, index: int) -> Any:
    """``host`` as this process's own CPU tensor (a copy: the memory it views may be staged for others too)."""
    global _cpu_warned
    if not _cpu_warned:
        _cpu_warned = True
        warnings.warn(f"a CUDA tensor (from GPU {uuid or index}) arrived in a process that sees no GPU: it is a CPU "
                      "tensor here. Give the receiving procs GPUs (spawn_procs(per_host={'gpus': N}) on a host with "
                      "them), or send tensor.cpu() to say so", CudaTensorOnCpuWarning, stacklevel=3)
    return host.clone()


def _device_for(torch: Any, uuid: str) -> int:
    """The receiver's index of the sender's GPU ``uuid``: the same GPU when visible, else the current one."""
    for i in range(torch.cuda.device_count()):
        if uuid and str(torch.cuda.get_device_properties(i).uuid) == uuid:
            return i
    return torch.cuda.current_device()


def rebuild(buf: Any, dtype: str, shape: tuple[int, ...], uuid: str, index: int) -> Any:
    """A CUDA tensor on this side: opened by IPC, copied from host bytes to a GPU, or a CPU tensor (no GPU).

    Raises:
        RuntimeError: the tensor's IPC handle cannot be opened here, or the frame is neither
            bytes nor a handle (it left its sender unresolved).
    """
    import torch

    pending = _pending_of(buf)
    if pending is not None:  # the sender's own process: a copy, as another process would get
        return pending.tensor.clone()
    view = memoryview(buf).cast("B")
    if view.nbytes != getattr(torch, dtype).itemsize * math.prod(shape):
        return _open(torch, view, uuid)
    host = tensor_over(view, dtype, shape)
    if torch.cuda.is_available():
        return _to_device(torch, host, f"cuda:{_device_for(torch, uuid)}")
    return _on_cpu(host, uuid, index)


#: From this size on, host memory is registered with CUDA for the copy to the GPU (the
#: registration costs about 50 µs per MiB; a copy from registered memory runs at the
#: bus's speed, from pageable memory at a fraction of it).
_REGISTER_MIN = 4 << 20
_PAGE = mmap.PAGESIZE


def _to_device(torch: Any, host: Any, device: str) -> Any:
    """``host`` (a CPU tensor over received memory) copied to ``device``, through a registration of its
    pages with CUDA for the copy when it is large (none where CUDA refuses one)."""
    if host.nbytes < _REGISTER_MIN:
        return host.to(device)
    cudart = torch.cuda.cudart()
    start = host.data_ptr() & ~(_PAGE - 1)
    length = -(-(host.data_ptr() + host.nbytes - start) // _PAGE) * _PAGE
    registered = int(cudart.cudaHostRegister(start, length, 0)) == 0
    try:
        return host.to(device)
    finally:
        if registered:
            cudart.cudaHostUnregister(start)


def _open(torch: Any, view: memoryview, uuid: str) -> Any:
    if bytes(view[:len(_DESCRIPTOR)]) != _DESCRIPTOR:
        raise RuntimeError("a CUDA tensor arrived without its data (its frame was not resolved for this "
                           "receiver): a tetrarch bug; set TETRARCH_CUDA_IPC=0 to work around it")
    (device, shape, stride, offset, dtype, handle, size_bytes, offset_bytes, counter, counter_offset, event_handle,
     event_sync) = pickle.loads(view[len(_DESCRIPTOR):])
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    try:
        return rebuild_cuda_tensor(torch.Tensor, torch.Size(shape), stride, offset, torch.storage.TypedStorage,
                                   getattr(torch, dtype), device, handle, size_bytes, offset_bytes, False, counter,
                                   counter_offset, event_handle, event_sync)
    except (RuntimeError, AssertionError) as exc:
        raise RuntimeError(f"cannot open the CUDA IPC handle of a tensor on GPU {uuid or '?'} (device {device} "
                           f"here): {exc}. Set TETRARCH_CUDA_IPC=0 to send CUDA tensors through host "
                           "memory") from exc
