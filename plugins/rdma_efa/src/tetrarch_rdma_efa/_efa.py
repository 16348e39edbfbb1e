"""The ``efa`` RDMA backend: one-sided fi_read / fi_write through libfabric.

Provider: ``TETRARCH_EFA_PROVIDER`` (setting ``efa_provider``, default ``efa``), read when
a buffer is registered; the provider travels in the buffer's context, and an initiator
opens an endpoint of that provider on first use (one endpoint per process and
provider, see ``_endpoint``). The context is ``{"prov", "name" (the owner's endpoint
name), "key", "addr" (remote address of the region's first byte: its virtual address
under FI_MR_VIRT_ADDR, else 0)}``.

Trust: a context is untrusted. The provider checks every access against the key's
registered bounds, and before its first transfer to a buffer an initiator confirms
``(buffer id, provider, key)`` with the owner (one control request, then cached), which
answers the region's real size; a forged buffer id or size is refused there. When a
completion fails, the owner is asked again, so a dropped buffer is reported as dropped.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

from tetrarch import SupervisionError
from tetrarch._rdma._gpu import GpuRuntime, gpu_runtime
from tetrarch.plugins import LocalRegion, MemoryKind, RdmaBackend, RdmaHost, RemoteRegion, process_gone, settle
from tetrarch.rdma import RDMAError

from ._build import load
from ._endpoint import Endpoint, EndpointError, Transfer, shm_pid
from ._plugin import chosen_provider

__all__ = ["EfaRdmaBackend"]

_CHECK = "efa.check"
_CONFIRM_TIMEOUT = 30.0
#: Providers measured to refuse a closed memory key (tests/test_efa_bad_input.py); with any other
#: (``shm`` of libfabric 1.17 accepts a closed key) the owner confirms the buffer before every transfer.
KEYS_ENFORCED = frozenset({"efa", "tcp;ofi_rxm", "verbs;ofi_rxm"})


def _context(remote: RemoteRegion) -> dict[str, Any]:
    ctx = remote.context
    if not (isinstance(ctx, dict) and isinstance(ctx.get("prov"), str) and isinstance(ctx.get("name"), bytes)
            and type(ctx.get("key")) is int and type(ctx.get("addr")) is int):
        raise RDMAError(f"malformed efa context in the descriptor of RDMA buffer {remote.buffer_id}: {ctx!r:.200}")
    return ctx


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
        self._mrs: dict[int, tuple[Endpoint, Any, int, int]] = {}  # buffer id -> (endpoint, mr, key, nbytes)
        self._keys = itertools.count(1)
        self._confirmed: dict[tuple[str, int, str, int], int] = {}  # (owner, buffer, prov, key) -> size

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
                    _sweep_dead_shm()
                found = self._endpoints[provider] = Endpoint(self._module, provider, hmem=_gpu_here())
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

        Raises:
            ValueError: device memory on a provider without FI_HMEM, or read-only memory whose
                address is unknown (bytes).
            RDMAError: the provider's endpoint cannot open, or fi_mr_regattr failed.
        """
        if not region.address:
            raise ValueError("the efa backend needs the memory's address; pass writable memory (a bytearray)")
        ep = self.endpoint(chosen_provider())
        lib = ep.lib
        iface = _iface(ep, region)
        readonly = region.view is not None and region.view.readonly
        access = lib.FI_REMOTE_READ | (0 if readonly else lib.FI_REMOTE_WRITE)
        mr, key, _desc = ep.register(region.address, region.nbytes, access, next(self._keys), iface,
                                     max(region.device, 0))
        with self._lock:
            self._mrs[buffer_id] = (ep, mr, key, region.nbytes)
        addr = region.address if ep.mr_mode & lib.FI_MR_VIRT_ADDR else 0
        return {"prov": ep.provider, "name": ep.name, "key": key, "addr": addr}

    def deregister(self, buffer_id: int) -> None:
        """Close the buffer's registration: its key stops working. Never raises."""
        with self._lock:
            found = self._mrs.pop(buffer_id, None)
        if found is not None:
            found[0].close_mr(found[1])

    def on_request(self, peer: str, request: object) -> object:
        """Confirm ``(efa.check, buffer id, provider, key)``: the buffer's size if it is live here with that key.

        Raises:
            RDMAError: malformed request, a buffer dropped or unknown here (the owner's table
                says which), or a key or provider that is not the buffer's.
        """
        if not (isinstance(request, tuple) and len(request) == 4 and request[0] == _CHECK):
            raise RDMAError(f"malformed efa request: {request!r:.200}")
        _op, buffer_id, prov, key = request
        with self._lock:
            found = self._mrs.get(buffer_id) if type(buffer_id) is int else None
        if found is None:
            self.host.lookup(buffer_id, 0, 1)  # raises the table's precise RDMAError (released, dropped, unknown)
            raise RDMAError(f"RDMA buffer {buffer_id} is not registered with efa at {self.host.identity.address}")
        ep, _mr, real_key, nbytes = found
        self.host.lookup(buffer_id, 0, nbytes)
        if prov != ep.provider or key != real_key:
            raise RDMAError(f"RDMA buffer {buffer_id}'s descriptor does not match its registration (provider "
                            f"{prov!r}, key {key!r}): a forged or corrupt handle; ask its owner for a fresh one")
        return nbytes

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
        ctx = _context(remote)
        ep = self.endpoint(ctx["prov"])
        iface = _iface(ep, local)
        keep: object = local.view if local.view is not None else local
        address = local.address
        if not address and local.view is not None:  # read-only bytes as a write source: give them an address
            staged = bytearray(local.view)
            keep, address = staged, ep.ffi.cast("uintptr_t", ep.ffi.from_buffer(staged)).__int__()
        fut: Future[None] = Future()
        confirm = self._confirm(remote, ctx, deadline)

        def go(f: Future[object]) -> None:
            error = f.exception()
            if error is None and offset + local.nbytes > _size(f.result()):
                error = RDMAError(f"refused an access of {local.nbytes} bytes at offset {offset} of RDMA buffer "
                                  f"{remote.buffer_id} ({f.result()} bytes at its owner): outside the registered "
                                  f"region")
            if error is not None:
                settle(fut, error)
                return
            try:
                # The endpoint now (it may have been replaced while the owner answered), and the
                # owner's address resolved just before the post (see _endpoint: generations).
                self._post(self.endpoint(ctx["prov"]), write, ctx, remote, offset,
                           (address, iface, max(local.device, 0)), local.nbytes, keep, deadline, fut)
            except Exception as exc:  # noqa: BLE001 - reported through the future
                settle(fut, exc)

        confirm.add_done_callback(go)
        return fut

    def _confirm(self, remote: RemoteRegion, ctx: dict[str, Any], deadline: float) -> Future[object]:
        ident = (remote.owner.address, remote.buffer_id, ctx["prov"], ctx["key"])
        known = self._confirmed.get(ident)
        if known is not None:
            done: Future[object] = Future()
            done.set_result(known)
            return done
        timeout = max(0.1, min(_CONFIRM_TIMEOUT, deadline - time.monotonic()))
        reply = self.host.call(remote.owner.address, (_CHECK, remote.buffer_id, ctx["prov"], ctx["key"]), timeout)

        def remember(f: Future[object]) -> None:
            if ctx["prov"] in KEYS_ENFORCED and f.exception() is None and type(f.result()) is int:
                self._confirmed[ident] = _size(f.result())

        reply.add_done_callback(remember)
        return reply

    def _post(self, ep: Endpoint, write: bool, ctx: dict[str, Any], remote: RemoteRegion, offset: int,
              local: tuple[int, int, int], nbytes: int, keep: object, deadline: float, fut: Future[None]) -> None:
        """Queue the transfer on ``ep``; ``fut`` is settled when it ends.

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
                                         next(self._keys), iface, device)

            def release() -> None:
                ep.close_mr(mr)

        base = ctx["addr"] + offset
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
                self._explain(remote, ctx, error, fut)

        transfer = Transfer(write, chunks, desc, peer, ctx["key"], deadline, done, release, gen)

        def ended(f: Future[None]) -> None:
            # The frontend fails this future when the owner dies: stop the transfer, so that it
            # neither waits for its deadline in the endpoint nor holds a window slot.
            error = None if f.cancelled() else f.exception()
            if error is not None or f.cancelled():
                died = isinstance(error, SupervisionError)
                ep.cancel(transfer, error or RDMAError("the efa transfer was cancelled"), owner_died=died)
                if died and ep.provider == "shm":
                    _unlink_dead_shm(ctx["name"])  # if it is not reaped yet, close() sweeps it

        fut.add_done_callback(ended)
        ep.submit(transfer)

    def _explain(self, remote: RemoteRegion, ctx: dict[str, Any], error: BaseException, fut: Future[None]) -> None:
        """Fail ``fut`` with the owner's word on the buffer (dropped, unknown) or else ``error``."""
        self._confirmed.pop((remote.owner.address, remote.buffer_id, ctx["prov"], ctx["key"]), None)
        if isinstance(error, TimeoutError):
            settle(fut, error)
            return
        check = self.host.call(remote.owner.address, (_CHECK, remote.buffer_id, ctx["prov"], ctx["key"]), 5.0)

        def decide(f: Future[object]) -> None:
            owner_says = f.exception()
            if isinstance(owner_says, (RDMAError, SupervisionError)):
                settle(fut, owner_says)  # the buffer is gone, or its owner (the connection reset was its death)
            elif owner_says is not None:
                settle(fut, RDMAError(f"efa transfer on RDMA buffer {remote.buffer_id} of {remote.owner.address} "
                                    f"failed: {error}; and its owner did not answer whether the buffer is live "
                                    f"({owner_says!r}): retry once it answers, or select another backend"))
            else:
                settle(fut, RDMAError(f"efa transfer on RDMA buffer {remote.buffer_id} of {remote.owner.address} "
                                    f"failed: {error}; the buffer is live at its owner, so the path is at fault: "
                                    f"retry, or select another backend (RDMABuffer(..., backend='tcp'))"))

        check.add_done_callback(decide)

    def close(self) -> None:
        """Close every registration and endpoint. Never raises."""
        with self._lock:
            mrs, self._mrs = list(self._mrs.values()), {}
            endpoints, self._endpoints = list(self._endpoints.values()), {}
            endpoints += self._retired
            self._retired = []
        for ep, mr, _key, _n in mrs:
            ep.close_mr(mr)
        for ep in endpoints:
            ep.close()
        if any(ep.provider == "shm" for ep in endpoints):
            # Dead processes' segments, and ours: every endpoint of this process is closed now,
            # or abandoned in a stuck provider call, whose segment fi_close will never remove.
            _sweep_dead_shm(including=os.getpid())


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


def _unlink_dead_shm(name: bytes) -> None:
    """Remove a SIGKILLed shm owner's segment (``fi_shm://PID:...`` lives at ``/dev/shm/PID:...``),
    which it could not remove itself; only when no process ``PID`` exists. Never raises."""
    pid = shm_pid(name)
    if pid is None or not process_gone(pid):
        return  # not a shm name, or alive (or its pid reused): not ours to remove
    segment = name.rstrip(b"\0").decode(errors="replace").removeprefix("fi_shm://")
    with contextlib.suppress(OSError):
        os.unlink(f"/dev/shm/{segment}")


#: libfabric 1.17's shm provider names its segment ``/dev/shm/PID:EP:N``.
_SHM_SEGMENT = re.compile(r"(\d+):\d+:\d+")


def _sweep_dead_shm(including: int | None = None) -> None:
    """Remove the shm provider's segments of processes that no longer run (a SIGKILLed process
    cannot remove its own; each holds 16 MiB of /dev/shm until someone does), and those of the
    process ``including`` (this one, once its endpoints are closed). Never raises."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for name in names:
        match = _SHM_SEGMENT.fullmatch(name)
        if match and (int(match.group(1)) == including or process_gone(int(match.group(1)))):
            with contextlib.suppress(OSError):
                os.unlink(f"/dev/shm/{name}")


def _nothing() -> None:
    pass


def _size(value: object) -> int:
    """The owner's answer to a check: the buffer's size (anything else counts as 0: nothing fits)."""
    return value if type(value) is int else 0
