"""The ``shm`` RDMA backend: owner and initiator on one host, one copy, no socket on the data path.

Mechanism: cross-memory attach
==============================

The bytes move with ``process_vm_readv`` / ``process_vm_writev`` (``tetrarch._runtime.plumbing._cma``)
straight between the two address spaces, the way UCX's ``cma`` transport and MPI do inside
a node. The alternative, a shared mapping, only works when the owner's bytes already live
in shared memory; a user's tensor does not (``RDMABuffer(t)`` registers ``t`` in place, and
moving it into ``/dev/shm`` would be a copy at registration that also breaks aliasing:
the owner's later in-place updates would not be seen). Measured on this 2-core VM
(``benchmarks/bench_shm_mechanisms.py``, 512 MiB, touched buffers): a cached shared
mapping copies at ~1.0x memcpy, cross-memory attach at ~0.5-0.9x (it pins each page in
the kernel), mapping the file per transfer at ~0.55-0.65x. cma serves every CPU buffer
without copying or re-allocating it, so it is the mechanism; see the issue's note.

Who copies: the owner
=====================

A transfer is one control request (``RdmaHost.call``) to the owner's backend, which checks
it against its registration table (``RdmaHost.lookup``: the buffer exists, is not dropped,
the range is inside it), marks it in flight, and copies between its own region and the
initiator's memory: ``process_vm_writev`` into the initiator's ``dst`` for a read,
``process_vm_readv`` from its ``src`` for a write. So

* a forged or stale descriptor can never make anyone read or write outside a live region
  of the owner (the owner's table decides, not the descriptor: the context holds no
  address at all);
* ``deregister`` waits for copies in flight on that buffer, so no copy touches the region
  after it returned;
* a dead owner fails the call (``SupervisionError``) instead of leaving a half-done copy.

Trust model
===========

The kernel lets a process cross-memory-attach to any process it may ptrace: on a machine
without Yama restrictions, every process of the same user. tetrarch's procs of one
allocation run as one user and have authenticated with the allocation's secret; the OS
already lets each of them read and write the others' whole memory, so this backend adds no
power an attacker of the same user lacks. What it does guarantee is that honest code
holding a bad descriptor fails cleanly. The owner acts on a request's *initiator* pid and
address; it refuses a pid of another user or another pid namespace, so it is never a
confused deputy for a less privileged peer, but a same-user peer can name another
same-user process as the target (which it could attach to directly anyway).

Applicability (``can_reach``): same host name and boot id, same pid namespace (a pid means
the same process on both sides), same user, and cross-memory attach allowed here (probe).
Otherwise the frontend selects another backend (``tcp``).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future

from .._errors import RDMAError
from .._runtime.plumbing._cma import CmaError, cma_probe, vm_read, vm_write
from ._backend import LocalRegion, MemoryKind, RdmaBackend, RdmaHost, RemoteRegion

__all__ = ["ShmRdmaBackend"]

#: The owner copies in slices of this size and gives up between slices once the deadline passed.
SLICE = 16 << 20
#: How long past the transfer's deadline the initiator waits for the owner's answer, so that its
#: future (which keeps the initiator's memory alive) is never done while the owner may still copy.
GRACE_S = 10.0

_READ, _WRITE = "shm.read", "shm.write"


def pid_namespace() -> str:
    """This process's pid namespace (``dev:inode`` of ``/proc/self/ns/pid``), or "" if unknown."""
    try:
        st = os.stat("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{st.st_dev}:{st.st_ino}"


def _uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


class ShmRdmaBackend(RdmaBackend):
    """Same-host RDMA by cross-memory attach; the owner validates and performs every copy."""

    memory_kinds = frozenset({MemoryKind.CPU})

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._live: set[int] = set()
        self._inflight: dict[int, int] = {}
        self._pidns = pid_namespace()
        self._uid = os.geteuid()
        self._usable, self._why = cma_probe()

    def start(self, host: RdmaHost) -> None:
        """Keep ``host``.

        Raises:
            RDMAError: cross-memory attach is not allowed here (the probe's reason).
        """
        if not self._usable:
            raise RDMAError(f"the shm RDMA backend cannot run here: {self._why}")
        super().start(host)

    # -- owner side -------------------------------------------------------------------------

    def register(self, region: LocalRegion, buffer_id: int) -> object:
        """Expose ``region`` (CPU memory) as ``buffer_id``; the context says where it can be reached from.

        Raises:
            ValueError: ``region`` is not CPU memory with a view.
        """
        if region.kind is not MemoryKind.CPU or region.view is None:
            raise ValueError(f"the shm RDMA backend moves CPU memory only, not {region.kind.value}")
        with self._cond:
            self._live.add(buffer_id)
        return {"pidns": self._pidns, "uid": self._uid}

    def deregister(self, buffer_id: int) -> None:
        """Forget ``buffer_id`` and wait until no copy of it is in flight. Never raises."""
        with self._cond:
            self._live.discard(buffer_id)
            while self._inflight.get(buffer_id):
                self._cond.wait()

    def on_request(self, peer: str, request: object) -> object:
        """Copy between a registered region and the initiator's memory, as ``request`` asks.

        Raises:
            RDMAError: a malformed request, a buffer that is unknown or dropped here, a
                range outside it, an initiator of another user or pid namespace, the deadline
                passed, or the copy failed (the message says which).
        """
        op, buffer_id, offset, nbytes, pid, address, pidns, deadline = _parse(request)
        if pidns != self._pidns:
            raise RDMAError("shm transfer refused: the initiator runs in another pid namespace; use the 'tcp' backend")
        if _uid_of(pid) != self._uid:
            raise RDMAError(f"shm transfer refused: process {pid} does not run as this owner's user (uid {self._uid})")
        region = self.host.lookup(buffer_id, offset, nbytes)  # RDMAError: unknown, dropped, out of range
        if region.view is None:
            raise RDMAError(f"buffer {buffer_id} is not CPU memory")
        with self._cond:
            if buffer_id not in self._live:
                raise RDMAError(f"buffer {buffer_id} was dropped (or never registered with shm) at its owner")
            self._inflight[buffer_id] = self._inflight.get(buffer_id, 0) + 1
        try:
            self._copy(op, region.view, pid, address, deadline)
        finally:
            with self._cond:
                left = self._inflight[buffer_id] - 1
                if left:
                    self._inflight[buffer_id] = left
                else:
                    del self._inflight[buffer_id]
                    self._cond.notify_all()
        return None

    @staticmethod
    def _copy(op: str, view: memoryview, pid: int, address: int, deadline: float) -> None:
        for start in range(0, len(view), SLICE):
            if time.monotonic() > deadline:  # CLOCK_MONOTONIC is one clock for the whole host
                raise RDMAError("shm transfer stopped at its owner: the deadline passed")
            part = view[start:start + SLICE]
            try:
                if op == _READ:
                    vm_write(pid, address + start, part)
                else:
                    vm_read(pid, address + start, part)
            except CmaError as exc:
                raise RDMAError(f"shm copy between the owner and process {pid} failed: {exc}") from exc

    # -- initiator side ---------------------------------------------------------------------

    def can_reach(self, remote: RemoteRegion) -> str | None:
        """None when the owner is on this host, in this pid namespace and of this user."""
        ctx = remote.context
        if not (isinstance(ctx, dict) and isinstance(ctx.get("pidns"), str) and type(ctx.get("uid")) is int):
            return "malformed shm context in the buffer's descriptor"
        if not self._usable:
            return self._why
        if not remote.owner.same_host_as(self.host.identity):
            return "the owner runs on another host"
        if not self._pidns or ctx["pidns"] != self._pidns:
            return "the owner runs in another pid namespace (another container)"
        if ctx["uid"] != self._uid:
            return f"the owner runs as uid {ctx['uid']} and this process as uid {self._uid}"
        return None

    def read(self, remote: RemoteRegion, offset: int, dst: LocalRegion, deadline: float) -> Future[None]:
        """Ask the owner to copy ``remote[offset:offset + dst.nbytes]`` into ``dst``."""
        return self._ask(_READ, remote, offset, dst, deadline)

    def write(self, remote: RemoteRegion, offset: int, src: LocalRegion, deadline: float) -> Future[None]:
        """Ask the owner to copy ``src`` into ``remote[offset:offset + src.nbytes]``."""
        return self._ask(_WRITE, remote, offset, src, deadline)

    def _ask(self, op: str, remote: RemoteRegion, offset: int, local: LocalRegion, deadline: float) -> Future[None]:
        if local.kind is not MemoryKind.CPU:
            raise ValueError(f"the shm RDMA backend moves CPU memory only, not {local.kind.value}")
        request = (op, remote.buffer_id, offset, local.nbytes, os.getpid(), local.address, self._pidns, deadline)
        timeout = max(0.0, deadline - time.monotonic()) + GRACE_S
        reply = self.host.call(remote.owner.address, request, timeout)
        done: Future[None] = Future()

        def finish(f: Future[object]) -> None:
            exc = f.exception()
            if exc is None:
                done.set_result(None)
            else:
                done.set_exception(exc)

        reply.add_done_callback(finish)
        return done

    def close(self) -> None:
        """Nothing to release: no mapping, segment or thread of its own. Never raises."""


def _parse(request: object) -> tuple[str, int, int, int, int, int, str, float]:
    """The fields of a transfer request, each checked (it comes from a peer).

    Raises:
        RDMAError: the request is malformed.
    """
    if not (isinstance(request, tuple) and len(request) == 8):
        raise RDMAError(f"malformed shm request: {request!r:.200}")
    op, buffer_id, offset, nbytes, pid, address, pidns, deadline = request
    ints = (buffer_id, offset, nbytes, pid, address)
    if (op not in (_READ, _WRITE) or any(type(v) is not int or v < 0 for v in ints) or pid == 0 or address == 0
            or nbytes == 0 or not isinstance(pidns, str) or not isinstance(deadline, (int, float))):
        raise RDMAError(f"malformed shm request: {request!r:.200}")
    return op, buffer_id, offset, nbytes, pid, address, pidns, float(deadline)
