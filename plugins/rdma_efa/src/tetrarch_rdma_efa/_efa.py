"""The ``efa`` RDMA backend: one-sided fi_read / fi_write through libfabric.

Provider: ``TETRARCH_EFA_PROVIDER`` (setting ``efa_provider``, default ``efa``), read when
a buffer is registered; the provider travels in the buffer's context, and an initiator
opens an endpoint of that provider on first use (one endpoint per process and
provider, see ``_endpoint``). The context is ``{"prov", "name"}`` (the owner's endpoint
name): nothing secret, nothing that locates memory.

Trust (issue 28): the owner decides. A reader gets a buffer's key and remote address only
from the owner, in answer to a request through the kernel's connections, which only peers
that proved the allocation's secret can make; the owner checks the request against its
registration table (buffer, range) before answering. Keys are random 64-bit values where
the provider takes requested keys, so a peer that skips the request cannot guess one, and
the owner's provider checks every access against the key's registration. Providers known to
do that check (``_plugin.OWNER_CHECKED``) have the answer cached per buffer; over any other
(``shm``: its reader copies any address with ``process_vm_readv``) the backend registers
nothing unless the user gives the check up (``efa_allow_unchecked_access``), and then asks the
owner before every transfer. When a completion fails, the owner is asked again, so a dropped
buffer is reported as dropped.
"""

from __future__ import annotations

import atexit
import os
import secrets
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

from tetrarch import SupervisionError
from tetrarch.plugins.rdma import (
    GpuRuntime,
    LocalRegion,
    MemoryKind,
    RdmaBackend,
    RdmaHost,
    RemoteRegion,
    gpu_runtime,
    settle,
)
from tetrarch.rdma import RDMAError

from ._bind import bind_node
from ._build import load
from ._endpoint import Endpoint, EndpointError, Transfer
from ._janitor import start_janitor, stop_janitor, sweep_dead_shm, unlink_dead_shm
from ._plugin import OWNER_CHECKED, chosen_provider, unchecked_refusal

__all__ = ["EfaRdmaBackend"]

_CHECK = "efa.check"
_CONFIRM_TIMEOUT = 30.0
#: Providers whose owner-side check of every access lets a reader cache the owner's answer
#: (they also refuse a closed key, tests/test_efa_bad_input.py); with any other the owner
#: checks each transfer (``shm`` of libfabric 1.17 accepts a closed key).
KEYS_ENFORCED = frozenset(OWNER_CHECKED)
_U64 = 1 << 64
_NAME_MAX = 256


def _context(remote: RemoteRegion) -> dict[str, Any]:
    """The efa context of ``remote``, checked for shape only (it is a peer's word).

    Raises:
        RDMAError: anything but ``{"prov": str, "name": bytes}`` of sane lengths.
    """
    ctx = remote.context
    if not (isinstance(ctx, dict) and set(ctx) == {"prov", "name"} and isinstance(ctx["prov"], str)
            and 0 < len(ctx["prov"]) <= 64 and isinstance(ctx["name"], bytes) and 0 < len(ctx["name"]) <= _NAME_MAX):
        raise RDMAError(f"malformed efa context in the descriptor of RDMA buffer {remote.buffer_id}: {ctx!r:.200}; "
                        f"an efa handle holds only the provider and the owner's endpoint name (keys and addresses "
                        f"come from the owner): a forged or corrupt handle, ask its owner for a fresh one")
    return ctx


def _grant(value: object, buffer_id: int) -> tuple[int, int, int]:
    """The owner's answer to a check, ``(size, key, remote address)``, checked to fit 64 bits.

    Raises:
        RDMAError: an answer of another shape (an owner of another tetrarch version, or a bug).
    """
    if not (isinstance(value, tuple) and len(value) == 3 and all(type(v) is int for v in value)
            and value[0] > 0 and 0 <= value[1] < _U64 and value[2] >= 0 and value[2] + value[0] <= _U64):
        raise RDMAError(f"the owner of RDMA buffer {buffer_id} answered the efa check with {value!r:.100}, not "
                        f"(size, key, address): a tetrarch-rdma-efa of another version there? Use one version")
    return value[0], value[1], value[2]


class EfaRdmaBackend(RdmaBackend):
    """RDMA through a libfabric provider (``efa`` on EFA hardware; ``shm``/``tcp;ofi_rxm`` for tests)."""

    #: CPU memory; :meth:`start` adds CUDA (CUDA and ROCm tensors) when the provider offers FI_HMEM.
    memory_kinds = frozenset({MemoryKind.CPU})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._module: Any = None
        self._endpoints: dict[str, Endpoint] = {}
        self._retired: list[Endpoint] = []  # endpoints replaced after a dead owner stalled them
        self._failed: dict[str, str] = {}
        # buffer id -> (endpoint, mr, key, nbytes, remote address of its first byte)
        self._mrs: dict[int, tuple[Endpoint, Any, int, int, int]] = {}
        self._confirmed: dict[tuple[str, int, str], tuple[int, int, int]] = {}  # (owner, buffer, prov) -> grant

    def start(self, host: RdmaHost) -> None:
        """Build or load the libfabric binding and open the configured provider's endpoint.

        Raises:
            RDMAError: libfabric, its headers, cffi or a compiler is missing, or the provider
                cannot open an RDM endpoint with RMA (the message names the fix).
        """
        super().start(host)
        # Nothing in a proc's exit closes the RDMA runtime: without this, every shm endpoint left
        # its 16 MiB segment in /dev/shm (fi_close removes it; a normal interpreter exit runs atexit).
        atexit.register(self.close)
        if self.endpoint(chosen_provider()).hmem:
            self.memory_kinds = frozenset({MemoryKind.CPU, MemoryKind.CUDA})

    def endpoint(self, provider: str) -> Endpoint:
        """This process's endpoint of ``provider``, opened on first use.

        Raises:
            RDMAError: as :meth:`start` (remembered: a failed provider is not retried).
        """
        with self._lock:
            found = self._endpoints.get(provider)
            if found is not None and not (found.dead_orphans and self._owns_nothing(found)) and not found.wedged:
                return found
            if found is not None:  # stalled or stuck by a dead process inside the provider: start afresh
                del self._endpoints[provider]
                self._retired.append(found)  # closed now in the background, and again (idempotent) at close()
                threading.Thread(target=found.close, name="tetrarch-efa-close", daemon=True).start()
            if provider in self._failed:
                raise EndpointError(self._failed[provider])
            try:
                if self._module is None:
                    self._module = load()
                if provider == "shm":
                    sweep_dead_shm()
                    start_janitor()  # removes this process's segment however it ends
                node = bind_node(provider, self.host.identity.address)
                found = self._endpoints[provider] = Endpoint(self._module, provider, hmem=_gpu_here(), node=node)
            except RDMAError as exc:
                self._failed[provider] = str(exc)
                raise
            return found

    def _owns_nothing(self, ep: Endpoint) -> bool:
        """Whether no buffer of this process is registered through ``ep`` (it may be replaced)."""
        return all(found[0] is not ep for found in self._mrs.values())

    # ------------------------------------------------------------ owner side
    def register(self, region: LocalRegion, buffer_id: int) -> object:
        """Register ``region`` with the configured provider; the context peers use to reach it.

        Device memory (a CUDA or ROCm tensor) is registered with libfabric's HMEM interface
        where the provider offers ``FI_HMEM`` (:attr:`memory_kinds` then includes CUDA).

        The key is a random 64-bit value (where the provider takes requested keys) that only
        :meth:`on_request` hands out; the context holds none.

        Raises:
            ValueError: device memory on a provider without FI_HMEM, read-only memory whose
                address is unknown (bytes), or a provider that does not check peers' accesses on
                the owner's side while ``efa_allow_unchecked_access`` is off (the message says so).
            RDMAError: the provider's endpoint cannot open, or fi_mr_regattr failed.
        """
        if not region.address:
            raise ValueError("the efa backend needs the memory's address; pass writable memory (a bytearray)")
        provider = chosen_provider()
        refusal = unchecked_refusal(provider)
        if refusal:
            raise ValueError(refusal)
        ep = self.endpoint(provider)
        lib = ep.lib
        iface = _iface(ep, region)
        readonly = region.view is not None and region.view.readonly
        access = lib.FI_REMOTE_READ | (0 if readonly else lib.FI_REMOTE_WRITE)
        mr, key, _desc = ep.register(region.address, region.nbytes, access, _random_key(ep), iface,
                                     max(region.device, 0))
        base = region.address if ep.mr_mode & lib.FI_MR_VIRT_ADDR else 0
        with self._lock:
            self._mrs[buffer_id] = (ep, mr, key, region.nbytes, base)
        return {"prov": ep.provider, "name": ep.name}

    def deregister(self, buffer_id: int) -> None:
        """Close the buffer's registration: its key stops working. Never raises."""
        with self._lock:
            found = self._mrs.pop(buffer_id, None)
        if found is not None:
            found[0].close_mr(found[1])

    def on_request(self, peer: str, request: object) -> object:
        """Answer ``(efa.check, buffer id, provider, offset, nbytes)`` from ``peer`` (a process of
        this allocation: the kernel's connections admit no other) with ``(size, key, remote
        address)`` of the buffer, once the registration table says the range lies in it.

        Raises:
            RDMAError: malformed request, a buffer dropped or unknown here or a range outside it
                (the owner's table says which), or a provider that is not the buffer's.
        """
        if not (isinstance(request, tuple) and len(request) == 5 and request[0] == _CHECK):
            raise RDMAError(f"malformed efa request: {request!r:.200}")
        _op, buffer_id, prov, offset, nbytes = request
        with self._lock:
            found = self._mrs.get(buffer_id) if type(buffer_id) is int else None
        if found is None:
            self.host.lookup(buffer_id, 0, 1)  # raises the table's precise RDMAError (released, dropped, unknown)
            raise RDMAError(f"RDMA buffer {buffer_id} is not registered with efa at {self.host.identity.address}")
        ep, _mr, key, size, base = found
        self.host.lookup(buffer_id, offset, nbytes)  # the range, checked by the owner's table
        if prov != ep.provider:
            raise RDMAError(f"RDMA buffer {buffer_id}'s descriptor names provider {prov!r}, but it is registered "
                            f"over {ep.provider!r}: a forged or corrupt handle; ask its owner for a fresh one")
        return size, key, base

    # ------------------------------------------------------------ initiator side
    def can_reach(self, remote: RemoteRegion) -> str | None:
        """None unless the context is malformed or its provider failed to open here."""
        try:
            prov = _context(remote)["prov"]
        except RDMAError as exc:
            return str(exc)
        return self._failed.get(prov)

    def moves(self, kind: MemoryKind, remote: RemoteRegion) -> bool:
        """Host memory always; device memory where the endpoint of the buffer's provider has FI_HMEM."""
        if kind is MemoryKind.CPU:
            return True
        if kind is not MemoryKind.CUDA or MemoryKind.CUDA not in self.memory_kinds:
            return False
        try:
            return self.endpoint(_context(remote)["prov"]).hmem
        except RDMAError:
            return False  # the transfer itself reports why

    def read(self, remote: RemoteRegion, offset: int, dst: LocalRegion, deadline: float) -> Future[None]:
        """fi_read ``remote[offset:offset + dst.nbytes]`` into ``dst``."""
        return self._transfer(False, remote, offset, dst, deadline)

    def write(self, remote: RemoteRegion, offset: int, src: LocalRegion, deadline: float) -> Future[None]:
        """fi_write ``src`` into ``remote[offset:offset + src.nbytes]``."""
        return self._transfer(True, remote, offset, src, deadline)

    def _transfer(self, write: bool, remote: RemoteRegion, offset: int, local: LocalRegion,
                  deadline: float) -> Future[None]:
        """One transfer, tried again once on a fault of the libfabric path (the owner confirmed the
        buffer, range, key and address; a software provider's connection broke): the failed attempt
        forgot the owner's address, so the next one connects afresh."""
        outer: Future[None] = Future()

        def attempt(again: bool) -> None:
            inner = self._transfer_once(write, remote, offset, local, deadline)

            def stop_inner(f: Future[None]) -> None:  # the frontend ended it (its owner died): stop the attempt
                if not inner.done():
                    settle(inner, RDMAError("the efa transfer was cancelled") if f.cancelled()
                           else f.exception() or RDMAError("the efa transfer ended"))

            outer.add_done_callback(stop_inner)

            def ended(f: Future[None]) -> None:
                error = None if f.cancelled() else f.exception()
                if (error is not None and again and getattr(error, "path_fault", False)
                        and time.monotonic() < deadline and not outer.done()):
                    attempt(False)
                    return
                settle(outer, error)

            inner.add_done_callback(ended)

        attempt(True)
        return outer

    def _transfer_once(self, write: bool, remote: RemoteRegion, offset: int, local: LocalRegion,
                       deadline: float) -> Future[None]:
        ctx = _context(remote)
        ep = self.endpoint(ctx["prov"])
        iface = _iface(ep, local)
        keep: object = local.view if local.view is not None else local
        address = local.address
        if not address and local.view is not None:  # read-only bytes as a write source: give them an address
            staged = bytearray(local.view)
            keep, address = staged, ep.ffi.cast("uintptr_t", ep.ffi.from_buffer(staged)).__int__()
        fut: Future[None] = Future()
        confirm = self._confirm(remote, ctx, offset, local.nbytes, deadline)

        def go(f: Future[object]) -> None:
            error = f.exception()
            if error is None:
                try:
                    grant = _grant(f.result(), remote.buffer_id)
                    if offset + local.nbytes > grant[0]:  # a cached grant: the owner checked another range
                        raise RDMAError(f"refused an access of {local.nbytes} bytes at offset {offset} of RDMA "
                                        f"buffer {remote.buffer_id} ({grant[0]} bytes at its owner): outside the "
                                        f"registered region")
                    # The endpoint now (it may have been replaced while the owner answered), and the
                    # owner's address resolved just before the post (see _endpoint: generations).
                    self._post(self.endpoint(ctx["prov"]), write, ctx, grant, remote, offset,
                               (address, iface, max(local.device, 0)), local.nbytes, keep, deadline, fut)
                except Exception as exc:  # noqa: BLE001 - reported through the future
                    error = exc
            if error is not None:
                settle(fut, error)

        confirm.add_done_callback(go)
        return fut

    def _check(self, remote: RemoteRegion, prov: str, offset: int, nbytes: int, timeout: float) -> Future[object]:
        """Ask the owner for ``(size, key, address)`` of the buffer, range checked there."""
        return self.host.call(remote.owner.address, (_CHECK, remote.buffer_id, prov, offset, nbytes), timeout)

    def _confirm(self, remote: RemoteRegion, ctx: dict[str, Any], offset: int, nbytes: int,
                 deadline: float) -> Future[object]:
        """The owner's grant for this transfer: cached per buffer where the provider checks each
        access on the owner's side (:data:`KEYS_ENFORCED`), else asked for every transfer."""
        ident = (remote.owner.address, remote.buffer_id, ctx["prov"])
        known = self._confirmed.get(ident)
        if known is not None:
            done: Future[object] = Future()
            done.set_result(known)
            return done
        reply = self._check(remote, ctx["prov"], offset, nbytes, max(0.1, min(_CONFIRM_TIMEOUT,
                                                                             deadline - time.monotonic())))

        def remember(f: Future[object]) -> None:
            if ctx["prov"] in KEYS_ENFORCED and f.exception() is None:
                try:
                    self._confirmed[ident] = _grant(f.result(), remote.buffer_id)
                except RDMAError:
                    pass  # the transfer reports it

        reply.add_done_callback(remember)
        return reply

    def _post(self, ep: Endpoint, write: bool, ctx: dict[str, Any], grant: tuple[int, int, int],
              remote: RemoteRegion, offset: int, local: tuple[int, int, int], nbytes: int, keep: object,
              deadline: float, fut: Future[None]) -> None:
        """Queue the transfer on ``ep`` with the owner's ``grant`` (size, key, address); ``fut`` is
        settled when it ends.

        Raises:
            RDMAError: the AV refused the owner's name, the local registration failed, or the
                endpoint is closed (replaced meanwhile): the caller settles ``fut`` with it.
        """
        lib, ffi = ep.lib, ep.ffi
        address, iface, device = local  # address, fi_hmem_iface, GPU ordinal
        peer, gen = ep.peer(ctx["name"])
        desc, release = ffi.NULL, _nothing
        if ep.mr_mode & lib.FI_MR_LOCAL or (iface != lib.FI_HMEM_SYSTEM and ep.mr_mode & lib.FI_MR_HMEM):
            mr, _key, desc = ep.register(address, nbytes, lib.FI_WRITE if not write else lib.FI_READ,
                                         _random_key(ep), iface, device)

            def release() -> None:
                ep.close_mr(mr)

        _size, key, base = grant
        base += offset
        chunks = deque((address + rel, min(ep.chunk, nbytes - rel), base + rel) for rel in range(0, nbytes, ep.chunk))

        def done(error: BaseException | None) -> None:
            _ = keep  # the local memory lives until every chunk completed (or the endpoint closed)
            if fut.done():
                return  # the frontend ended it (the owner died): nothing to explain
            if error is None:
                settle(fut, None)
            else:
                if not isinstance(error, TimeoutError):
                    ep.forget(ctx["name"], gen)  # not an entry inserted again since
                self._explain(remote, ctx, grant, (offset, nbytes), error, fut)

        transfer = Transfer(write, chunks, desc, peer, key, deadline, done, release, gen)

        def ended(f: Future[None]) -> None:
            # The frontend fails this future when the owner dies: stop the transfer, so that it
            # neither waits for its deadline in the endpoint nor holds a window slot.
            error = None if f.cancelled() else f.exception()
            if error is not None or f.cancelled():
                died = isinstance(error, SupervisionError)
                ep.cancel(transfer, error or RDMAError("the efa transfer was cancelled"), owner_died=died)
                if died and ep.provider == "shm":
                    unlink_dead_shm(ctx["name"])  # if it is not reaped yet, close() sweeps it

        fut.add_done_callback(ended)
        ep.submit(transfer)

    def _explain(self, remote: RemoteRegion, ctx: dict[str, Any], grant: tuple[int, int, int],
                 span: tuple[int, int], error: BaseException, fut: Future[None]) -> None:
        """Fail ``fut`` with what happened: the owner's word on the buffer (dropped, unknown, the
        range outside it), a registration that changed, or else the provider's ``error`` on a
        buffer and range the owner confirms with the key and address the transfer used."""
        self._confirmed.pop((remote.owner.address, remote.buffer_id, ctx["prov"]), None)
        if isinstance(error, TimeoutError):
            settle(fut, error)
            return
        check = self._check(remote, ctx["prov"], span[0], span[1], 5.0)
        what = (f"efa transfer of {span[1]} bytes at offset {span[0]} of RDMA buffer {remote.buffer_id} "
                f"({remote.owner.address}) over {ctx['prov']!r}")

        def decide(f: Future[object]) -> None:
            owner_says = f.exception()
            if isinstance(owner_says, (RDMAError, SupervisionError)):
                settle(fut, owner_says)  # the buffer is gone, or its owner (the connection reset was its death)
            elif owner_says is not None:
                settle(fut, RDMAError(f"{what} failed in the provider ({error}), and its owner did not say whether "
                                      f"the buffer is live ({owner_says!r}): retry once it answers, or select "
                                      f"another backend"))
            elif f.result() != grant:
                settle(fut, RDMAError(f"{what} failed in the provider ({error}): the buffer's registration at its "
                                      f"owner changed meanwhile; retry"))
            else:
                fault = RDMAError(f"{what} failed in the provider ({error}), although the owner confirms the "
                                  f"buffer, the range, the key and the address it used: a fault of the libfabric "
                                  f"path between the two processes; retry, or select another backend "
                                  f"(RDMABuffer(..., backend='tcp'))")
                fault.path_fault = True  # type: ignore[attr-defined]  # _transfer tries once more
                settle(fut, fault)

        check.add_done_callback(decide)

    def close(self) -> None:
        """Close every registration and endpoint. Never raises."""
        with self._lock:
            mrs, self._mrs = list(self._mrs.values()), {}
            endpoints, self._endpoints = list(self._endpoints.values()), {}
            endpoints += self._retired
            self._retired = []
        for ep, mr, _key, _n, _base in mrs:
            ep.close_mr(mr)
        for ep in endpoints:
            ep.close()
        if any(ep.provider == "shm" for ep in endpoints):
            # Dead processes' segments, and ours: every endpoint of this process is closed now,
            # or abandoned in a stuck provider call, whose segment fi_close will never remove.
            sweep_dead_shm(including=os.getpid())
            stop_janitor()


def _gpu_here() -> bool:
    """Whether this process's torch has a GPU: only then is an endpoint asked for FI_HMEM (an HMEM
    endpoint may take other protocols, and host-only processes keep the plain one). Never raises."""
    torch = sys.modules.get("torch")
    try:
        return torch is not None and bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA install means no GPU here
        return False


def _iface(ep: Endpoint, region: LocalRegion) -> int:
    """libfabric's ``fi_hmem_iface`` for ``region``: SYSTEM for host memory, CUDA or ROCR for a GPU's.

    Raises:
        ValueError: device memory where ``ep``'s provider lacks FI_HMEM, or memory of another kind.
    """
    lib = ep.lib
    if region.kind is MemoryKind.CPU:
        if region.view is None:
            raise ValueError("the efa backend got CPU memory without a view")
        return int(lib.FI_HMEM_SYSTEM)
    if region.kind is not MemoryKind.CUDA:
        raise ValueError(f"the efa backend moves CPU and CUDA/ROCm memory, not {region.kind.value}")
    if not ep.hmem:
        raise ValueError(f"libfabric provider {ep.provider!r} does not offer FI_HMEM here, so the efa backend "
                         f"cannot reach device memory through it; the transfer must stage through host memory")
    return int(lib.FI_HMEM_ROCR if gpu_runtime() is GpuRuntime.ROCM else lib.FI_HMEM_CUDA)


def _nothing() -> None:
    pass


def _random_key(ep: Endpoint) -> int:
    """A requested key nobody can guess: random, as wide as the provider's keys (64 bits on
    ``tcp;ofi_rxm``; ignored where the provider picks keys, FI_MR_PROV_KEY)."""
    return secrets.randbits(8 * max(1, min(8, ep.key_size)))
