"""``RDMABuffer``: a picklable handle on registered memory; transfers and backend choice."""

from __future__ import annotations

import functools
import math
import time
from concurrent.futures import Future as CFuture
from typing import Any, NamedTuple

from .._errors import ArgumentError, RDMAError
from .._plugins import BackendKind, BackendUnavailable, Status, get_registry
from .._runtime.values._context import context
from .._runtime.values._future import Future
from .._telemetry import _io
from ._backend import LocalRegion, MemoryKind, PeerIdentity, RemoteRegion, settle
from ._fallback_warning import QUIET, tcp_carries_a_transfer
from ._memory import Memory, as_memory
from ._service import rdma_service
from ._staging import finish, stage

__all__ = ["DEFAULT_TIMEOUT", "Descriptor", "RDMABuffer", "as_future", "start_transfer"]

DEFAULT_TIMEOUT = 60.0


class Descriptor(NamedTuple):
    """What travels when an RDMABuffer is pickled (builtins and PeerIdentity only)."""

    buffer_id: int
    size: int
    owner: PeerIdentity
    #: The owning actor's id (or ``<root>``) for display.
    owner_name: str
    #: One context per backend the owner registered the memory with.
    contexts: dict[str, object]


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0 or math.isinf(timeout):
        raise ArgumentError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
    return float(timeout)


def choose_backend(desc: Descriptor) -> str:
    """The backend a transfer from this process to ``desc``'s owner uses (docs/plugins.md §4
    among those the owner registered with that can reach it from here).

    Raises:
        BackendNotFound, BackendUnavailable: no shared backend works (each one's reason is given).
    """
    service = rdma_service()
    remote_reasons = []
    shared = []
    for name in desc.contexts:
        try:
            backend = service.backend(name)
        except Exception as exc:  # noqa: BLE001 - that backend is not usable here: say why
            remote_reasons.append(f"{name}: {exc}")
            continue
        why = backend.can_reach(RemoteRegion(desc.owner, desc.buffer_id, desc.size, desc.contexts[name]))
        if why is None:
            shared.append(name)
        else:
            remote_reasons.append(f"{name}: {why}")
    if not shared:
        remedy = ("install the owner's backend here, or have the owner register with one this process has: "
                  "`tetrarch plugins` lists them")
        raise BackendUnavailable(
            f"no RDMA backend of this process can reach the buffer owned by {desc.owner_name} at "
            f"{desc.owner.address}: the owner registered it with {sorted(desc.contexts)}, and here "
            + "; ".join(remote_reasons) + f" ({remedy})", kind=BackendKind.RDMA, remedy=remedy,
            reason=f"no RDMA backend of this process can reach a buffer registered with {sorted(desc.contexts)}",
        )
    spec = get_registry().select(BackendKind.RDMA, among=shared, request=QUIET)
    if spec.name not in shared:
        raise BackendUnavailable(
            f"RDMA backend {spec.name!r} was chosen (rdma_backend setting) but cannot reach the buffer owned by "
            f"{desc.owner_name} at {desc.owner.address}: the owner registered it with {sorted(desc.contexts)}"
            + (f" ({'; '.join(remote_reasons)})" if remote_reasons else "")
            + "; unset TETRARCH_RDMA_BACKEND or choose one of those", kind=BackendKind.RDMA, name=spec.name,
            reason=f"the buffer's owner registered it with {sorted(desc.contexts)} only",
            remedy=f"unset TETRARCH_RDMA_BACKEND or choose one of {sorted(desc.contexts)}",
        )
    return spec.name


def start_transfer(desc: Descriptor, write: bool, local: Memory, timeout: float,
                   backend_name: str | None = None) -> CFuture[None]:
    """Start one whole-buffer read (``write=False``) into ``local`` or write from it; never raises
    for a failed transfer (the future holds the error)."""
    fut: CFuture[None]
    service = rdma_service()
    region = local.region
    try:
        name = backend_name or choose_backend(desc)
        backend = service.backend(name)
        if name == "tcp":
            tcp_carries_a_transfer(desc.contexts)
        staged = None
        remote = RemoteRegion(desc.owner, desc.buffer_id, desc.size, desc.contexts[name])
        if not backend.moves(region.kind, remote):
            if region.kind is not MemoryKind.CUDA or MemoryKind.CPU not in backend.memory_kinds:
                raise ArgumentError(f"RDMA backend {name!r} cannot move {region.kind.value} memory (it takes "
                                    f"{sorted(k.value for k in backend.memory_kinds)}): pass a host tensor (t.cpu())")
            staged = stage(local, write)  # through pinned host memory (docs/rdma.md, "GPU memory")
            local = staged.memory
            region = local.region
        deadline = time.monotonic() + timeout
        op = backend.write if write else backend.read
        fut = moved = op(remote, 0, region, deadline)
        if staged is not None:
            fut = CFuture()
            moved.add_done_callback(functools.partial(finish, staged, fut=fut))
    except Exception as exc:  # noqa: BLE001 - the caller's future carries it
        fut = CFuture()
        fut.set_exception(exc)
        return fut
    owner = desc.owner.address
    # The owner's death fails the backend's own future: a dead owner touches no memory any more.
    service.watch(owner, moved)
    if name != "tcp" and not service.router.is_local(owner):
        service.pool.submit(_ping, service, owner)  # a connection to the owner, so its death is seen
    # The local memory lives until the BACKEND is done with it, not until the caller's deadline:
    # a timed-out transfer may still be copying into ``local`` (the interface's contract).
    moved.add_done_callback(_keep(local))
    if _io.ON:
        moved.add_done_callback(functools.partial(_io.rdma_done, name, write, region.nbytes))
    caller: CFuture[None] = CFuture()
    fut.add_done_callback(functools.partial(_relay, caller))
    verb = "write_from" if write else "read_into"
    what = f"RDMABuffer.{verb} of {region.nbytes} bytes ({name}) with {desc.owner_name}"
    service.deadlines.fail_after(caller, timeout, what)
    return caller


def _relay(caller: CFuture[None], fut: CFuture[None]) -> None:
    """Complete the caller's future like the backend's, unless its deadline failed it first."""
    settle(caller, RDMAError("the RDMA backend cancelled the transfer") if fut.cancelled() else fut.exception())


def _keep(local: Memory) -> Any:
    def done(_f: CFuture[None]) -> None:
        del _f  # ``local`` is referenced by this closure until the future is done
        assert local is not None

    return done


def _ping(service: Any, owner: str) -> None:
    from .._runtime.router._router import PeerUnreachable
    from .._runtime.values import _wire

    try:
        service.router.send(owner, [_wire.sys_header("rdma", "ping")])
    except PeerUnreachable as exc:
        service.owner_died(owner, str(exc))  # a refusal (another allocation) is reported as one


def as_future(cfs: list[CFuture[None]]) -> Future[None]:
    """One tetrarch Future: done when all are, failed with the first failure."""
    out: Future[None] = Future._new()
    left = [len(cfs)]

    def done(f: CFuture[None]) -> None:
        error = f.exception()
        if error is not None:
            out._set_exception(error)
            return
        left[0] -= 1
        if left[0] == 0:
            out._set_result(None)

    if not cfs:
        out._set_result(None)
    for cf in cfs:
        cf.add_done_callback(done)
    return out


class RDMABuffer:
    """Memory of this process registered for one-sided reads and writes by other processes.

    ``RDMABuffer(data)`` takes a 1-D contiguous CPU ``torch.Tensor`` (any dtype), a 1-D
    C-contiguous numpy array or memoryview, writable, and registers it **without copying**
    with every RDMA backend available here. The handle is picklable: return it from an
    endpoint or pass it to another actor; any process holding it can :meth:`read_into` and
    :meth:`write_from` while the owner keeps it. The registration does not keep the memory
    alive; it is released by :meth:`drop`, when the memory is freed, or when the actor (or
    proc) that made it stops.
    """

    __slots__ = ("_desc", "_dropped", "_local", "__weakref__")

    def __init__(self, data: Any, *, backend: str | None = None) -> None:
        """Register ``data``.

        Args:
            backend: register with this RDMA backend only (default: every available one).

        Raises:
            TypeError: not a tensor, numpy array or memoryview, or read-only memory.
            ValueError: empty, multi-dimensional, non-contiguous or CUDA memory (the message
                says the fix: ``t.view(torch.uint8).flatten()``).
            BackendNotFound, BackendUnavailable: ``backend`` (or ``TETRARCH_RDMA_BACKEND``) names
                one that cannot be used, no backend can register the memory, or the TCP fallback
                is needed but disabled (``TETRARCH_RDMA_FALLBACK=0``).
        """
        memory = as_memory(data, "RDMABuffer(data)", writable=True)
        registry = get_registry()
        if backend is not None:
            names = [registry.select(BackendKind.RDMA, backend).name]
        else:
            # an unusable explicit choice or a refused fallback fails now
            registry.select(BackendKind.RDMA, request=QUIET)
            names = [r.name for r in registry.statuses(BackendKind.RDMA)
                     if r.status is Status.AVAILABLE and not r.on_request]
        service = rdma_service()
        buffer_id, contexts = service.register(memory, names)
        owner = context().actor_instance.actor_id
        self._desc = Descriptor(buffer_id, memory.region.nbytes, service.identity, owner, contexts)
        self._dropped = False
        self._local = True

    @classmethod
    def _from_descriptor(cls, desc: Descriptor) -> RDMABuffer:
        self = cls.__new__(cls)
        self._desc = Descriptor(*desc)
        self._dropped = False
        self._local = False
        return self

    def __reduce__(self) -> tuple:
        return (RDMABuffer._from_descriptor, (tuple(self._desc),))

    def __repr__(self) -> str:
        state = ", dropped" if self._dropped else ""
        return f"RDMABuffer({self._desc.size} bytes, owner={self.owner!r}{state})"

    # ------------------------------------------------------------ properties
    def size(self) -> int:
        """The buffer's length in bytes."""
        return self._desc.size

    @property
    def owner(self) -> str:
        """Who registered the memory: ``"<actor id> at <process address>"``."""
        return f"{self._desc.owner_name} at {self._desc.owner.address}"

    @property
    def backend(self) -> str:
        """The RDMA backend a transfer from this process would use.

        Raises:
            BackendNotFound, BackendUnavailable: none of the owner's backends works from here.
        """
        return choose_backend(self._desc)

    # ------------------------------------------------------------ transfers
    def _check_live(self, what: str) -> None:
        if self._dropped:
            raise RDMAError(f"RDMABuffer.{what} on a dropped buffer ({self._desc.size} bytes from {self.owner}); "
                            f"ask the owner for a fresh RDMABuffer")

    def read_into(self, dst: Any, *, timeout: float = DEFAULT_TIMEOUT) -> Future[None]:
        """Copy the whole buffer into the leading bytes of ``dst`` (local, writable).

        Returns a Future; ``get()`` raises ``RDMAError`` (buffer dropped or released at its
        owner), ``SupervisionError`` (the owner's process died), ``TimeoutError`` (not done in
        ``timeout`` seconds).

        Raises:
            ValueError: ``dst`` is smaller than the buffer, empty, not 1-D or not contiguous;
                ``timeout`` is not positive.
            TypeError: ``dst`` is not a tensor, numpy array or writable memoryview.
            RDMAError: this handle was dropped.
        """
        memory = self._local_side(dst, "read_into", writable=True)
        return as_future([start_transfer(self._desc, False, memory, _check_timeout(timeout))])

    def write_from(self, src: Any, *, timeout: float = DEFAULT_TIMEOUT) -> Future[None]:
        """Copy ``src`` (local) into the leading bytes of the buffer. As :meth:`read_into`.

        Raises:
            ValueError: ``src`` is larger than the buffer, empty, not 1-D or not contiguous.
            TypeError, RDMAError: as :meth:`read_into`.
        """
        memory = self._local_side(src, "write_from", writable=False)
        return as_future([start_transfer(self._desc, True, memory, _check_timeout(timeout))])

    def _local_side(self, data: Any, what: str, *, writable: bool) -> Memory:
        self._check_live(what)
        arg = "dst" if writable else "src"
        memory = as_memory(data, f"RDMABuffer.{what}({arg})", writable=writable)
        return fit(memory, self._desc.size, what, arg)

    def drop(self) -> Future[None]:
        """Release the registration at its owner; later transfers by any holder fail with RDMAError.

        Idempotent. The future is done when the owner has released it.
        """
        self._dropped = True
        service = rdma_service()
        if service.router.is_local(self._desc.owner.address):
            service.deregister(self._desc.buffer_id)
            return as_future([])
        return as_future([service.request(self._desc.owner.address, "drop", self._desc.buffer_id,
                                          DEFAULT_TIMEOUT)])


def fit(memory: Memory, size: int, what: str, arg: str) -> Memory:
    """``memory`` cut to the buffer's ``size`` (a read's destination may be larger).

    Raises:
        ValueError: ``dst`` smaller than the buffer, or ``src`` larger.
    """
    region = memory.region
    if arg == "dst" and region.nbytes < size:
        raise ArgumentError(f"RDMABuffer.{what}: dst has {region.nbytes} bytes but the buffer holds {size}; "
                            f"pass a destination of at least {size} bytes")
    if arg == "src" and region.nbytes > size:
        raise ArgumentError(f"RDMABuffer.{what}: src has {region.nbytes} bytes but the buffer holds only {size}; "
                            f"write at most {size} bytes (slice src)")
    if region.nbytes == min(region.nbytes, size):
        return memory
    view = region.view[:size] if region.view is not None else None  # device memory has no view
    return Memory(LocalRegion(region.address, size, view, region.kind, region.device), memory.root, memory.tensor)
