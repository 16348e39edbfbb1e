"""One libfabric RDM endpoint (one per process and provider) and the thread that drives it.

Threading model: every data-path call (``fi_read``, ``fi_write``, ``fi_cq_read``) is made
by the endpoint's own progress thread; other threads only queue transfers. Memory
registration and address-vector inserts and removals come from callers' threads, so one
lock guards every libfabric call on the endpoint (libfabric objects are not assumed thread
safe), and a control-path call on a closed endpoint fails instead of touching it.

The thread also progresses the provider when this process only *owns* memory: software
providers (``tcp;ofi_rxm``, ``shm``) use manual progress, so a target that never polls its
completion queue never answers a peer's read. While transfers are in flight it polls
without pause (yielding the GIL); when idle it sleeps in steps of at most
:data:`IDLE_S`, woken early by a new transfer.

Address generations: a transfer carries the fi_addr of its owner *and the generation* of
that address-vector entry, both from :meth:`Endpoint.peer`. :meth:`Endpoint.forget` removes
an entry (under the lock) and the progress thread posts only a transfer whose generation is
the live entry's (checked under the same lock); any other fails with "try again". Posting to
a removed fi_addr is not an error libfabric 1.17 reports: ``shm`` looks the stale address up
in freed AV memory, trusts its own stale per-peer data and takes the spin lock of a peer
region it has unmapped (or NULL): SIGSEGV in ``pthread_spin_lock`` under ``fi_read``. The
backend used to resolve the address before asking the owner to confirm the buffer and post
after the answer, so a transfer to a SIGKILLed owner, failing meanwhile, removed the entry
between the two; and an fi_addr that a later insert hands out again would reach another peer.

``-FI_EAGAIN`` from a post (the first ``fi_write`` on ``tcp;ofi_rxm`` while it connects, or
a full transmit queue) leaves the chunk queued; the thread progresses the completion
queue and posts it again. Such a chunk holds back only later chunks *to the same peer*:
the thread goes on posting other peers' transfers (a dead or stopped owner, whose
connection never comes up, used to block every later transfer of the process until its
deadline). A completion-queue error entry fails its transfer with ``fi_cq_strerror``'s
text; the endpoint stays usable for the next transfer.

A transfer ends at its deadline, or when :meth:`Endpoint.cancel` is called (the backend
does when the frontend failed its future: the owner died): its unposted chunks are
dropped, ``fi_cancel`` is asked for each posted one, and its ``done`` is called at once.
Operations the provider cannot cancel (``tcp;ofi_rxm`` to a stopped owner) become
*orphans*: they no longer count against the window, and their memory (the local view,
the local MR, the op context) stays alive until their completion arrives (the owner
resumes, or its death closes the connection) or the endpoint closes, because the
provider may still write into it.

A *stuck* endpoint: every provider call is non-blocking, yet libfabric 1.17's ``shm``
provider guards each process's shared-memory region with a spin lock in that region, and
a process SIGKILLed while holding one (its own, while progressing; a peer's, while
posting) leaves it held for good: the next call that takes it spins forever. Two things
keep that from hanging the process: before posting to a ``shm`` peer the thread checks
that the peer's process (its pid is in its endpoint name) still runs, and fails the
transfer if not; and every lock the control path takes is taken with a bound, so once
the progress thread has been inside one round for :data:`WEDGED_S` the endpoint reports
itself :attr:`Endpoint.wedged`, its calls fail at once with an error that says so,
:meth:`Endpoint.close` abandons it to the process's exit, and the backend opens a fresh
one for later transfers.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from tetrarch.plugins import process_gone
from tetrarch.rdma import RDMAError

__all__ = ["CHUNK", "IDLE_S", "WEDGED_S", "Endpoint", "EndpointError", "Transfer", "shm_pid"]

#: The largest single fi_read/fi_write posted (a transfer is split into chunks of this size).
CHUNK = 64 << 20
#: How long the idle progress thread sleeps between polls.
IDLE_S = 0.001
_WINDOW = 64  # chunks in flight per endpoint at most
#: Seconds one progress round may last before the endpoint counts as stuck (a round makes
#: only non-blocking calls and takes microseconds; a loaded machine adds milliseconds).
WEDGED_S = 5.0
#: Seconds a control-path call (register, close, ...) waits for the progress thread's lock.
_LOCK_WAIT = 5.0


class EndpointError(RDMAError):
    """A libfabric call on the endpoint failed (the message names the call, the error and the fix)."""


@dataclass(eq=False, slots=True)
class Transfer:
    """One read or write: chunks to post, the callback when all completed (or one failed)."""

    write: bool
    chunks: deque[tuple[int, int, int]]  # (local address, length, remote address)
    desc: Any  # the local MR's descriptor (FI_MR_LOCAL) or NULL
    peer: int  # fi_addr_t of the owner
    key: int
    deadline: float
    done: Callable[[BaseException | None], None]
    release: Callable[[], None]  # closes the local MR; called on the progress thread once nothing is in flight
    gen: int  # generation of the AV entry ``peer`` (from Endpoint.peer): posted only while it is the live one
    inflight: int = 0
    error: BaseException | None = None
    reported: bool = False  # ``done`` was called (it is called once)
    freed: bool = False  # ``release`` was called (it is called once)
    owner_died: bool = False  # ended because its owner's process died
    contexts: list[Any] = field(default_factory=list)

    def free(self) -> None:
        """Call ``release`` once (on the progress thread, nothing of the transfer in flight)."""
        if not self.freed:
            self.freed = True
            self.release()


class Endpoint:
    """An RDM endpoint of ``provider`` with its fabric, domain, AV, CQ and progress thread.

    Raises (on construction):
        EndpointError: the provider is absent or refused an RDM endpoint with RMA.
    """

    def __init__(self, module: ModuleType, provider: str, hmem: bool = False, node: str | None = None) -> None:
        self.ffi, self.lib = module.ffi, module.lib
        ffi, lib = self.ffi, self.lib
        self.provider = provider
        out, stage = ffi.new("struct tf_ep **"), ffi.new("const char **")
        rc = lib.tf_open(provider.encode(), int(hmem), node.encode() if node else ffi.NULL, out, stage)
        if rc:
            call = ffi.string(stage[0]).decode()
            hint = ("the efa provider needs an EFA device (an AWS instance with EFA enabled); elsewhere set "
                    "TETRARCH_EFA_PROVIDER to a provider this libfabric offers (see `tetrarch plugins`)"
                    if provider == "efa" else
                    "pick a provider with RMA on RDM endpoints (e.g. 'shm', 'tcp;ofi_rxm'; see `tetrarch plugins`)")
            raise EndpointError(f"libfabric provider {provider!r} cannot open an RDM endpoint with one-sided RMA: "
                                f"{call} failed: {self.strerror(rc)}; {hint}")
        self._t = out[0]
        self.mr_mode = int(lib.tf_mr_mode(self._t))
        #: Whether this endpoint moves device memory (asked for with ``hmem``, and the provider offers FI_HMEM).
        self.hmem = bool(lib.tf_has_hmem(self._t))
        self.fabric = ffi.string(lib.tf_fabric_name(self._t)).decode(errors="replace")
        key_size = int(lib.tf_mr_key_size(self._t))
        #: Bytes of a memory key (requested keys are random values of this size).
        self.key_size = key_size
        max_msg = int(lib.tf_max_msg_size(self._t))
        self.chunk = min(CHUNK, max_msg) if max_msg else CHUNK
        self.window = max(1, min(_WINDOW, int(lib.tf_tx_size(self._t)) or _WINDOW))
        buf = ffi.new("char[]", 256)
        n = lib.tf_getname(self._t, buf, 256)
        if n < 0 or key_size > 8:
            lib.tf_close(self._t)
            why = self.strerror(n) if n < 0 else f"its memory keys have {key_size} bytes (FI_MR_RAW), not supported"
            raise EndpointError(f"libfabric provider {provider!r} is unusable here: {why}")
        self.name = bytes(ffi.buffer(buf, n))
        self._ctx_size = int(lib.tf_context_size())
        self._lock = threading.Lock()
        self._kick = threading.Event()  # wakes the idle progress thread (set without the lock)
        self._inbox: deque[Transfer] = deque()  # submitted, not yet queued (appended without the lock)
        self._ended = threading.Condition(self._lock)  # notified when transfers end or orphans complete
        self._queue: deque[Transfer] = deque()  # transfers with chunks left to post
        self._active: dict[int, tuple[Transfer, Any]] = {}  # context address -> (transfer, context)
        self._orphans: dict[int, tuple[Transfer, Any]] = {}  # ops of ended transfers still in flight
        self._peers: dict[bytes, tuple[int, int]] = {}  # owner's endpoint name -> (fi_addr, generation)
        self._gens: dict[int, int] = {}  # fi_addr -> generation of its live AV entry
        self._next_gen = itertools.count(1)
        self._finished: list[Transfer] = []
        self._released: list[Transfer] = []  # ended transfers whose last orphan completed
        self.completed = 0  # chunks completed without error (tests check the bytes went this way)
        self._closed = False
        self._busy_since = 0.0  # monotonic start of the progress thread's current round (0: between rounds)
        self._peer_pids: dict[int, int] = {}  # fi_addr -> pid of a shm peer (checked before each post)
        self._thread = threading.Thread(target=self._run, name=f"tetrarch-efa-{provider}", daemon=True)
        self._thread.start()

    def strerror(self, rc: int) -> str:
        """libfabric's text for the (negative or positive) error code ``rc``."""
        return f"{self.ffi.string(self.lib.fi_strerror(abs(int(rc)))).decode(errors='replace')} ({rc})"

    @property
    def wedged(self) -> bool:
        """Whether the progress thread has been stuck in one provider call for over :data:`WEDGED_S`."""
        since = self._busy_since
        return bool(since) and time.monotonic() - since > WEDGED_S

    @contextlib.contextmanager
    def _control(self, closed_ok: bool = False) -> Iterator[None]:
        """The endpoint's lock for a control-path call, taken within a bound.

        Raises:
            EndpointError: the progress thread is stuck inside the provider (see the module),
                or the endpoint is closed (unless ``closed_ok``: the caller makes no provider call).
        """
        if not self._lock.acquire(timeout=0 if self.wedged else _LOCK_WAIT):
            raise EndpointError(
                f"the libfabric endpoint of provider {self.provider!r} is stuck inside a provider call "
                f"(libfabric 1.17's shm provider spins for good on a lock that a killed process held); this "
                f"process opens a fresh endpoint for new transfers: register the buffers of this one again")
        try:
            if self._closed and not closed_ok:
                raise self._closed_error()
            yield
        finally:
            self._lock.release()

    def _closed_error(self) -> EndpointError:
        return EndpointError(f"the libfabric endpoint of provider {self.provider!r} is closed (replaced after a "
                             f"dead owner stalled it, or the RDMA runtime closed); try again")

    # ------------------------------------------------------------ control path (any thread)
    def peer(self, name: bytes) -> tuple[int, int]:
        """``(fi_addr, generation)`` of the endpoint named ``name`` (inserted into the AV once,
        and again after :meth:`forget`); a :class:`Transfer` carries both (see the module).

        Raises:
            EndpointError: the AV refused the name (a corrupt descriptor or another provider's
                name), or the endpoint is closed or stuck.
        """
        found = self._peers.get(name)  # no lock on a hit: the progress thread may be busy
        if found is not None and not self._closed:
            return found
        with self._control():
            found = self._peers.get(name)
            if found is not None:
                return found
            out = self.ffi.new("uint64_t *")
            rc = self.lib.tf_av_insert(self._t, name, out)
            if rc:
                raise EndpointError(f"fi_av_insert refused the owner's endpoint name ({len(name)} bytes) on provider "
                                    f"{self.provider!r}: {self.strerror(rc)}; the buffer's descriptor is corrupt or "
                                    f"comes from another provider")
            addr, gen = int(out[0]), next(self._next_gen)
            pid = shm_pid(name) if self.provider == "shm" else None
            if pid is not None:
                self._peer_pids[addr] = pid
            self._gens[addr] = gen
            self._peers[name] = (addr, gen)
            return addr, gen

    def forget(self, name: bytes, gen: int | None = None) -> None:
        """Drop the peer ``name`` from the AV after a failed completion, so the next transfer
        connects afresh (``tcp;ofi_rxm`` closes a connection on which a bad key was used).
        With ``gen``, only if that is still the entry's generation (an entry inserted again
        since stays). Never raises.

        Removing an address unmaps what the provider holds for it, and the address may be
        handed to the next peer inserted: transfers still queued for it fail now, later ones
        resolved before the removal fail when the progress thread finds their generation gone,
        and while operations to it are in flight it stays. On ``shm`` it always stays: there is
        no connection to reset, and libfabric 1.17's ``fi_av_remove`` leaves stale per-peer
        state behind (a later insert that reuses the slot may stall); a dead owner's entry is
        harmless, as nothing is posted to a ``shm`` peer whose process has ended.
        """
        with contextlib.suppress(EndpointError), self._control():
            found = self._peers.get(name)
            if found is None or (gen is not None and found[1] != gen):
                return
            addr = found[0]
            for transfer in (*self._inbox, *self._queue):
                if transfer.peer == addr and transfer.error is None:
                    transfer.error = EndpointError("an earlier transfer to the same owner failed; try again")
            if self.provider == "shm" or any(
                    t.peer == addr for t, _c in (*self._active.values(), *self._orphans.values())):
                return
            del self._peers[name]
            del self._gens[addr]  # before the removal: nothing posts to it from now on (same lock)
            self._peer_pids.pop(addr, None)
            self.lib.tf_av_remove(self._t, addr)

    def register(self, address: int, nbytes: int, access: int, requested_key: int, iface: int = 0,
                 device: int = 0) -> tuple[Any, int, Any]:
        """Register memory; ``(mr, key, desc)``.

        ``iface`` is libfabric's ``fi_hmem_iface``: ``FI_HMEM_SYSTEM`` (0) for host memory,
        ``FI_HMEM_CUDA``/``FI_HMEM_ROCR`` with the GPU's ordinal ``device`` for device memory,
        which needs a provider that offers ``FI_HMEM`` (:attr:`hmem`).

        Raises:
            EndpointError: fi_mr_regattr failed (e.g. too much pinned memory: ``ulimit -l``),
                or device memory on an endpoint without ``FI_HMEM``.
        """
        ffi, lib = self.ffi, self.lib
        if iface != lib.FI_HMEM_SYSTEM and not self.hmem:
            raise EndpointError(f"libfabric provider {self.provider!r} does not offer FI_HMEM here: it cannot "
                                f"register device memory (stage it through host memory)")
        mr, key, desc = ffi.new("struct fid_mr **"), ffi.new("uint64_t *"), ffi.new("void **")
        with self._control():
            rc = lib.tf_mr_reg(self._t, ffi.cast("void *", address), nbytes, access, requested_key, iface, device,
                               mr, key, desc)
        if rc:
            where = "host memory" if iface == lib.FI_HMEM_SYSTEM else f"device memory (GPU {device})"
            raise EndpointError(f"fi_mr_regattr of {nbytes} bytes of {where} on provider {self.provider!r} failed: "
                                f"{self.strerror(rc)}; check the locked-memory limit (ulimit -l)")
        return mr[0], int(key[0]), desc[0]

    def close_mr(self, mr: Any) -> None:
        """Close a registration; peers' accesses with its key fail from now on. Never raises
        (on a closed endpoint it does nothing: closing the domain took the registration)."""
        with contextlib.suppress(EndpointError), self._control():
            self.lib.tf_mr_close(mr)

    def submit(self, transfer: Transfer) -> None:
        """Queue ``transfer``; the progress thread posts its chunks and calls its ``done``.

        Takes no lock: a progress thread busy with a stalled peer cannot hold a caller up.

        Raises:
            EndpointError: the endpoint is closed.
        """
        if self._closed:
            raise self._closed_error()
        self._inbox.append(transfer)
        if self._closed:  # close() may have drained the inbox before the append: take it back
            with contextlib.suppress(ValueError):
                self._inbox.remove(transfer)
                raise self._closed_error()  # else the thread or close() took it, and reports it
        self._kick.set()

    def cancel(self, transfer: Transfer, error: BaseException, owner_died: bool = False) -> None:
        """End ``transfer`` with ``error`` (its owner died, or its caller gave up): post no more
        of it, ask the provider to cancel what is in flight. Takes no lock; never raises."""
        if transfer.error is None:
            transfer.error = error
        transfer.owner_died = transfer.owner_died or owner_died
        self._kick.set()

    @property
    def dead_orphans(self) -> bool:
        """Whether operations to a dead owner are still in flight: some providers (``shm`` of
        libfabric 1.17, which answers an endpoint's requests in order) then stall every later
        transfer of this endpoint, and only a fresh endpoint helps (see the backend)."""
        return any(t.owner_died for t, _c in [*self._orphans.values(), *self._active.values()])

    def pending(self) -> tuple[int, int]:
        """``(transfers queued or in flight, orphaned operations)`` (tests check reaping).

        Raises:
            EndpointError: the endpoint is stuck (see the module).
        """
        with self._control(closed_ok=True):
            return self._pending()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no transfer is queued or in flight (orphans aside); False if ``timeout`` passed first.

        Raises:
            EndpointError: the endpoint is stuck (see the module).
        """
        with self._control(closed_ok=True):
            return self._ended.wait_for(lambda: self._pending()[0] == 0, timeout)

    def _pending(self) -> tuple[int, int]:
        live = {id(t) for t in (*self._inbox, *self._queue)} | {id(t) for t, _c in self._active.values()}
        return len(live), len(self._orphans)

    def close(self) -> None:
        """Stop the thread and close the endpoint; transfers still queued fail. Never raises.

        A stuck endpoint (see the module) is only marked closed: its thread cannot be stopped,
        and its transfers end at their deadlines.
        """
        try:
            with self._control(closed_ok=True):
                if self._closed:
                    return
                self._closed = True
                self._kick.set()
        except EndpointError:
            self._closed = True  # the thread ends if its call ever returns
            return
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            return  # a stuck provider call: leave the endpoint to the process's exit
        ended = [*self._inbox, *self._queue, *(t for t, _c in self._active.values())]
        for transfer in {id(t): t for t in ended}.values():
            transfer.error = transfer.error or EndpointError("the process's RDMA runtime closed")
            if not transfer.reported:
                transfer.reported = True
                transfer.done(transfer.error)  # its memory stays registered until tf_close below
        self._inbox.clear()
        self._queue.clear()
        self._active.clear()
        self._orphans.clear()
        # Control-path calls check _closed under this lock, so none is inside the provider now.
        if self._lock.acquire(timeout=_LOCK_WAIT):
            try:
                self._peers.clear()
                self._gens.clear()
                self.lib.tf_close(self._t)
            finally:
                self._lock.release()

    # ------------------------------------------------------------ progress thread
    def _run(self) -> None:
        ctxs = self.ffi.new("void *[]", 64)
        idle = 0
        while True:
            with self._lock:
                if self._closed:
                    return
                self._busy_since = time.monotonic()
                while self._inbox:
                    self._queue.append(self._inbox.popleft())
                self._reap()
                busy = self._post() | self._poll(ctxs)
                finished, self._finished = self._finished, []
                released, self._released = self._released, []
                if finished or released:
                    self._ended.notify_all()
                rest = not busy and not finished and not released and not self._active and not self._queue
                self._busy_since = 0.0
            if rest:
                self._kick.wait(min(IDLE_S, 0.00005 * (1 << min(idle, 5))))
                self._kick.clear()
                idle += 1
                continue
            for transfer in finished:
                _report(transfer)
            for transfer in released:
                transfer.free()
            idle = 0
            time.sleep(0)  # let callers' threads have the GIL between polls

    def _post(self) -> bool:
        """Post queued chunks, in order per transfer; a peer that answers -FI_EAGAIN is skipped
        (its later chunks wait) while other peers' transfers go on."""
        posted = False
        now = time.monotonic()
        waiting: set[int] = set()  # peers whose post returned -FI_EAGAIN this round
        gone: dict[int, bool] = {}  # shm peers' pids checked this round
        i = 0
        while i < len(self._queue) and len(self._active) < self.window:
            transfer = self._queue[i]
            if transfer.error is not None or now > transfer.deadline:
                transfer.error = transfer.error or _expired()
                del self._queue[i]
                self._finish_if_idle(transfer)
                continue
            if transfer.peer in waiting:
                i += 1
                continue
            if self._gens.get(transfer.peer) != transfer.gen:
                # Its AV entry was removed (and maybe its fi_addr reused) after it was resolved: posting
                # would make shm take the lock of an unmapped region (see the module).
                transfer.error = EndpointError(
                    f"the owner's address was dropped from the libfabric endpoint of provider {self.provider!r} "
                    f"after an earlier transfer to it failed; this transfer did not start: try again")
                del self._queue[i]
                self._finish_if_idle(transfer)
                continue
            pid = self._peer_pids.get(transfer.peer)
            if pid is not None and gone.setdefault(pid, process_gone(pid)):
                # Posting could spin for good on a lock the dead process held (see the module).
                transfer.error = EndpointError(f"the owner's process (pid {pid}) has ended")
                del self._queue[i]
                self._finish_if_idle(transfer)
                continue
            local, length, remote = transfer.chunks[0]
            ctx = self.ffi.new("char[]", self._ctx_size)
            op = self.lib.tf_write if transfer.write else self.lib.tf_read
            try:
                rc = op(self._t, self.ffi.cast("void *", local), length, transfer.desc, transfer.peer, remote,
                        transfer.key, ctx)
            except (OverflowError, TypeError) as exc:  # a value outside 64 bits: this transfer fails, not the thread
                transfer.error = EndpointError(f"malformed efa transfer (remote address {remote!r}, key "
                                               f"{transfer.key!r}): {exc}; ask the buffer's owner for a fresh handle")
                del self._queue[i]
                self._finish_if_idle(transfer)
                continue
            if rc == -self.lib.FI_EAGAIN:
                waiting.add(transfer.peer)  # progress the CQ, then post again
                i += 1
                continue
            if rc < 0:
                call = "fi_write" if transfer.write else "fi_read"
                transfer.error = EndpointError(f"{call} on provider {self.provider!r} failed: {self.strerror(rc)}")
                del self._queue[i]
                self._finish_if_idle(transfer)
                continue
            transfer.chunks.popleft()
            if not transfer.chunks:
                del self._queue[i]
            transfer.inflight += 1
            self._active[int(self.ffi.cast("uintptr_t", ctx))] = (transfer, ctx)
            posted = True
        return posted

    def _reap(self) -> None:
        """End in-flight transfers whose deadline passed or that were cancelled: fi_cancel their
        operations and report them now; what the provider does not complete becomes an orphan."""
        now = time.monotonic()
        ended = [(key, t, c) for key, (t, c) in self._active.items() if t.error is not None or now > t.deadline]
        for key, transfer, ctx in ended:
            transfer.error = transfer.error or _expired()
            transfer.chunks.clear()
            self.lib.tf_cancel(self._t, ctx)  # -FI_ENOENT where the provider cannot: the op stays an orphan
            del self._active[key]
            self._orphans[key] = (transfer, ctx)
        for transfer in {id(t): t for _k, t, _c in ended}.values():
            if transfer in self._queue:
                self._queue.remove(transfer)
            if not transfer.reported:
                transfer.reported = True
                self._finished.append(transfer)  # reported by _run; released when its last orphan completes

    def _poll(self, ctxs: Any) -> bool:
        n = self.lib.tf_cq_read(self._t, ctxs, 64)
        if n == -self.lib.FI_EAGAIN:
            return False
        if n == -self.lib.FI_EAVAIL:
            self._read_error()
            return True
        if n < 0:
            error = EndpointError(f"fi_cq_read on provider {self.provider!r} failed: {self.strerror(n)}")
            for transfer, _ctx in list(self._active.values()):
                transfer.error = transfer.error or error
            return False
        self.completed += n
        for i in range(n):
            self._completed(int(self.ffi.cast("uintptr_t", ctxs[i])), None)
        return n > 0

    def _read_error(self) -> None:
        ffi = self.ffi
        ctx, err, prov_errno, text = ffi.new("void **"), ffi.new("int *"), ffi.new("int *"), ffi.new("char[]", 512)
        rc = self.lib.tf_cq_readerr(self._t, ctx, err, prov_errno, text, 512)
        if rc < 0:
            return
        detail = ffi.string(text).decode(errors="replace")
        error = EndpointError(f"a completion failed on provider {self.provider!r}: {self.strerror(err[0])}: "
                              f"{detail} (provider error {prov_errno[0]})")
        self._completed(int(ffi.cast("uintptr_t", ctx[0])), error)

    def _completed(self, ctx: int, error: BaseException | None) -> None:
        found = self._active.pop(ctx, None)
        if found is None:
            orphan = self._orphans.pop(ctx, None)
            if orphan is not None:
                orphan[0].inflight -= 1
                if not orphan[0].inflight:
                    self._released.append(orphan[0])  # its memory may go now
            return
        transfer = found[0]
        transfer.inflight -= 1
        if error is not None and transfer.error is None:
            transfer.error = error
            if transfer.chunks:  # post no more of it
                transfer.chunks.clear()
                if transfer in self._queue:
                    self._queue.remove(transfer)
        self._finish_if_idle(transfer)

    def _finish_if_idle(self, transfer: Transfer) -> None:
        if transfer.inflight or (transfer.chunks and transfer.error is None) or transfer.reported:
            return
        transfer.reported = True
        self._finished.append(transfer)  # released and reported by _run, outside the lock


def shm_pid(name: bytes) -> int | None:
    """The process id in a ``shm`` provider's endpoint name (``fi_shm://PID:...``), or None."""
    rest = name.rstrip(b"\0").decode(errors="replace").removeprefix("fi_shm://")
    pid = rest.split(":", 1)[0]
    return int(pid) if pid.isdigit() and rest and "/" not in rest else None


def _expired() -> TimeoutError:
    return TimeoutError("the efa transfer's deadline passed before all its chunks completed")


def _report(transfer: Transfer) -> None:
    """Release the transfer's local MR unless operations of it are still in flight (orphans:
    released when the last completes), then call its ``done``."""
    try:
        if not transfer.inflight:
            transfer.free()
    finally:
        transfer.done(transfer.error)
