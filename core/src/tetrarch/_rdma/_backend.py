"""The RDMA backend interface: what a backend (core's ``tcp``/``shm``, a plugin's ``efa``/``verbs``) implements.

A backend moves bytes between a *registered region* in one process (the **owner**, who
made the ``RDMABuffer``) and *local memory* in another (the **initiator**, who calls
``read_into`` / ``write_from``), one-sided: the owner's Python code takes no part in a
transfer unless the backend chooses so (``tcp`` does, hardware does not).

The layers
==========

``tetrarch.rdma`` (the frontend, ``tetrarch._rdma``) owns everything generic, so a
backend stays small:

* the registration table (buffer ids, sizes, the weak link to the user's tensor, release
  on ``drop()`` or when the owning actor or proc stops), and the picklable descriptor
  ``{buffer id, size, owner identity, {backend name: context}}``;
* argument checks (sizes, contiguity, memory kinds), backend selection per transfer
  (docs/plugins.md §4 among the backends both sides have), timeouts (the frontend fails
  the user's future at the deadline), and failing transfers whose owner process died
  (``SupervisionError``), watched through the kernel's connections;
* ``RDMAAction`` batching: transfers are grouped by backend and issued concurrently; a
  backend receives plain :meth:`RdmaBackend.read` / :meth:`RdmaBackend.write` calls, as
  many at once as the user asked for.

A backend implements :class:`RdmaBackend`. The registry builds one instance per process
(``BackendSpec.factory`` called with no arguments, lazily, when the backend is first
used) and the frontend then calls :meth:`RdmaBackend.start` once with an
:class:`RdmaHost`, before any other method.

Lifecycle of one buffer
=======================

Owner process::

    ctx = backend.register(region, buffer_id)     # pin / expose; returns the context
    ...                                           # ctx travels inside the descriptor
    backend.deregister(buffer_id)                 # drop(), actor/proc stop, or GC of the tensor

Any process holding the descriptor (the owner itself included)::

    remote = RemoteRegion(owner=..., buffer_id=..., size=..., context=ctx)
    if backend.can_reach(remote) is None:          # e.g. shm: same host only
        fut = backend.read(remote, offset, dst, deadline)   # remote[offset:offset+dst.nbytes] -> dst
        fut = backend.write(remote, offset, src, deadline)  # src -> remote[offset:offset+src.nbytes]

How the issue-13 backends fit
=============================

* **libfabric (efa, tcp;ofi_rxm, shm providers)**: ``start`` opens the fabric, domain, an
  RDM endpoint and a completion queue, and starts one progress thread polling the CQ.
  ``register`` does ``fi_mr_reg`` on ``region.address``/``region.nbytes`` with a random key and
  returns ``{"prov", "name"}`` (the endpoint's name: builtins only, nothing secret); the
  initiator asks the owner (``host.call``) for the key and remote address, which the owner
  gives a peer of its allocation once ``host.lookup`` accepted the range. It
  ``fi_av_insert``s the owner's endpoint name once, posts ``fi_read`` / ``fi_write`` chunks,
  and the progress thread completes the returned ``concurrent.futures.Future`` when the last
  chunk's completion arrives (or sets an exception on a CQ error). The owner's provider must
  check each access against the key's registration (``tcp;ofi_rxm``, a NIC); libfabric 1.17's
  ``shm`` does not, so the efa plugin refuses to register over it unless told otherwise.
* **ibverbs (RC queue pairs)**: ``register`` does ``ibv_reg_mr`` and returns
  ``{"rkey": ..., "addr": ..., "gid": ..., "lid": ...}``; the first transfer to an owner
  needs a connected QP pair: the initiator calls ``host.call(owner.address, {"qp": ...})``
  and the owner's backend answers in :meth:`RdmaBackend.on_request` with its own QP
  number after moving its side to RTR/RTS. Completions as above.

Rules every backend follows
===========================

* **Contexts are builtins.** What :meth:`RdmaBackend.register` returns is pickled into
  the descriptor and unpickled by processes that may not have your plugin installed: use
  only ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, and tuples, lists and
  dicts of those. Keep it small (it travels with every copy of the handle).
* **Contexts are untrusted.** A descriptor comes from a peer and may be forged or
  corrupted. A backend must never let one read or write outside a region its owner
  registered and has not deregistered: either the hardware checks (an rkey/MR key bounds
  the access), or the owner checks each request against its table with
  :meth:`RdmaHost.lookup` (``tcp`` does this), or the initiator confirms a context with the
  owner (``host.call``) before trusting an address from it and re-confirms after the owner
  deregistered. ``offset``/length are checked by the frontend against the descriptor's
  ``size`` only, which is just as forgeable.
* **Threads.** ``read``/``write`` are called from any thread, many at once, and must not
  block for the transfer (post, and return a future). ``on_request`` runs on a worker
  thread of the frontend (not the kernel's I/O thread) and may block briefly.
* **Memory lifetime.** The frontend keeps ``dst``/``src`` alive until the returned future
  is done. The owner's region stays registered until ``deregister`` returns; a transfer in
  flight at that moment may fail (with :class:`tetrarch.rdma.RDMAError` (``tetrarch._errors.RDMAError``)) but must never
  touch the memory after ``deregister`` returned.
* **Errors.** Complete the future with an exception rather than raising from
  ``read``/``write`` when the failure is found after posting. Use
  :class:`tetrarch.rdma.RDMAError` for "the owner refused" (unknown or dropped buffer,
  out of bounds) and anything else for local failures; the frontend turns a dead owner
  into ``SupervisionError`` and a missed deadline into ``TimeoutError`` itself.
"""

from __future__ import annotations

import enum
import socket
from abc import ABC, abstractmethod
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["LocalRegion", "MemoryKind", "PeerIdentity", "RdmaBackend", "RdmaHost", "RemoteRegion", "boot_id",
           "settle"]


def settle(fut: Future[Any], error: BaseException | None = None) -> None:
    """Complete a transfer's future with ``error`` (or success), unless it is done already.

    A transfer's future can be ended from several places (its completion, its deadline, its
    owner's death); whichever comes first wins and the others change nothing. Never raises.
    """
    try:
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)
    except InvalidStateError:
        pass


class MemoryKind(enum.Enum):
    """Where a region's bytes live."""

    CPU = "cpu"
    CUDA = "cuda"  # issue 13: device memory, registered through dma-buf


@dataclass(frozen=True, slots=True)
class LocalRegion:
    """Memory in this process: a region to register, or a transfer's local side.

    ``view`` is a writable (for a read's destination and for registrations) 1-D byte
    ``memoryview`` of exactly ``nbytes`` for CPU memory, and ``None`` for device memory;
    ``address`` is the address of its first byte in this process.
    """

    address: int
    nbytes: int
    view: memoryview | None
    kind: MemoryKind = MemoryKind.CPU
    #: The device ordinal for ``MemoryKind.CUDA``; -1 for CPU memory.
    device: int = -1


def boot_id() -> str:
    """This machine's boot id (``/proc/sys/kernel/random/boot_id``), or "" where there is none."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """Who owns a registered region: enough for a backend to reach it and to tell same-host.

    ``address`` is the owner process's kernel address (where ``host.call`` reaches the same
    backend in that process); ``pid`` its process id; ``hostname`` and ``boot_id``
    identify the machine (two processes are on the same host when both match, see
    :meth:`same_host_as`).
    """

    address: str
    pid: int
    hostname: str
    boot_id: str

    @classmethod
    def here(cls, address: str) -> PeerIdentity:
        """This process, listening at ``address``."""
        import os

        return cls(address, os.getpid(), socket.gethostname(), boot_id())

    def same_host_as(self, other: PeerIdentity) -> bool:
        """Whether both run on one machine (same host name and, where known, same boot id)."""
        return self.hostname == other.hostname and self.boot_id == other.boot_id


@dataclass(frozen=True, slots=True)
class RemoteRegion:
    """A registered region as an initiator sees it (built from a descriptor; untrusted).

    ``context`` is what this backend's :meth:`RdmaBackend.register` returned in the owner's
    process for buffer ``buffer_id``; ``size`` is the region's length in bytes.
    """

    owner: PeerIdentity
    buffer_id: int
    size: int
    context: object


class RdmaHost(Protocol):
    """What the frontend gives a backend in :meth:`RdmaBackend.start` (one per backend and process)."""

    @property
    def identity(self) -> PeerIdentity:
        """This process (what descriptors of buffers registered here carry as ``owner``)."""
        ...

    def lookup(self, buffer_id: int, offset: int, nbytes: int) -> LocalRegion:
        """Owner side: the part ``[offset, offset + nbytes)`` of registered buffer ``buffer_id``.

        The one check of a request against the registration table: the buffer exists
        here, is registered with this backend and is not dropped, and the range lies
        inside it. The returned region's view must not be used after the buffer's
        ``deregister``.

        Raises:
            RDMAError: no such buffer (never registered, dropped, forged id), or the range is
                outside it; the message says which.
        """
        ...

    def call(self, owner: str, request: object, timeout: float) -> Future[object]:
        """Send ``request`` (picklable, builtins preferred) to this backend's
        :meth:`RdmaBackend.on_request` in the process at ``owner`` (an ``PeerIdentity.address``).

        The future holds the reply, or the exception ``on_request`` raised there, or
        ``SupervisionError`` when that process died, or ``TimeoutError`` after ``timeout``.
        For control messages (connection set-up, confirming a context), not bulk data.
        """
        ...


class RdmaBackend(ABC):
    """One RDMA backend in one process. See the module docstring for the contract."""

    #: Memory kinds this backend can register and transfer (others are refused by the
    #: frontend with the list of backends that can).
    memory_kinds: frozenset[MemoryKind] = frozenset({MemoryKind.CPU})
    #: Set by the default :meth:`start`.
    host: RdmaHost

    def start(self, host: RdmaHost) -> None:
        """Bind to this process; called once, before any other method. Default: keep ``host``.

        Open devices, endpoints and progress threads here (not in ``__init__``, and never in
        the plugin's probe).

        Raises:
            Exception: the backend cannot start here; the frontend reports it as unavailable
                (with this message) and selects another one.
        """
        self.host = host

    @abstractmethod
    def register(self, region: LocalRegion, buffer_id: int) -> object:
        """Owner side: make ``region`` reachable by peers as buffer ``buffer_id``; return its context.

        Called once per buffer (the frontend caches registrations per address and size).
        The context must be builtins only (see the module docstring).

        Raises:
            ValueError: the region cannot be registered (e.g. a memory kind or size this
                backend does not support); the buffer is then made without this backend.
        """

    @abstractmethod
    def deregister(self, buffer_id: int) -> None:
        """Owner side: forget buffer ``buffer_id``; afterwards no transfer touches its memory.

        Idempotent; an unknown id is ignored. Must not raise.
        """

    def can_reach(self, remote: RemoteRegion) -> str | None:
        """Initiator side: ``None`` if this backend can transfer to/from ``remote`` from here,
        else the reason it cannot (e.g. "the owner runs on another host"). Must not block or raise.

        The frontend only asks backends present in the descriptor; default: reachable.
        """
        return None

    def moves(self, kind: MemoryKind, remote: RemoteRegion) -> bool:
        """Initiator side: whether a transfer with ``remote`` takes local memory of ``kind`` as it
        is; if not, the frontend stages device memory through pinned host memory. Must not raise
        (it may open what the transfer needs, as :meth:`read` would). Default: ``kind in
        memory_kinds`` (override where it depends on the peer, e.g. a provider that reaches
        device memory on one path but not another).
        """
        return kind in self.memory_kinds

    @abstractmethod
    def read(self, remote: RemoteRegion, offset: int, dst: LocalRegion, deadline: float) -> Future[None]:
        """Initiator side: copy ``remote[offset : offset + dst.nbytes]`` into ``dst``.

        ``deadline`` is a ``time.monotonic()`` value after which the frontend has given up
        (stop retrying; completing late is harmless). Returns at once; the future completes
        when every byte of ``dst`` is written, or with the error.

        Raises:
            Exception: only for failures found before anything was posted.
        """

    @abstractmethod
    def write(self, remote: RemoteRegion, offset: int, src: LocalRegion, deadline: float) -> Future[None]:
        """Initiator side: copy ``src`` into ``remote[offset : offset + src.nbytes]``.

        As :meth:`read`; the future completes when the bytes are in the owner's memory.
        """

    def on_request(self, peer: str, request: object) -> object:
        """Owner side: answer a :meth:`RdmaHost.call` from the process at ``peer``.

        Runs on a worker thread. The returned value is pickled back; an exception travels
        back to the caller. Default: refuse.

        Raises:
            NotImplementedError: this backend takes no requests.
        """
        raise NotImplementedError(f"RDMA backend {type(self).__name__} takes no control requests")

    def close(self) -> None:  # noqa: B027 - optional hook with a default
        """Release everything (registrations, endpoints, threads, shared-memory segments).

        Called once when the process's runtime shuts down; must not raise.
        """
