"""One per process: the registration table, the ``rdma`` service, started backends, death watch.

The ``rdma`` service answers (on the kernel's I/O thread, handing anything slow to a
small worker pool) the ops ``call`` (a backend's control request), ``drop`` and
``ping``, plus ops a core backend adds with :meth:`RdmaService.add_op` (``tcp``'s data
path).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future as CFuture
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .._errors import RDMAError, SupervisionError
from .._log import get_logger
from .._plugins import BackendKind, get_registry
from .._runtime.process._root import get_root
from .._runtime.router._router import PeerUnreachable, Router
from .._runtime.values import _serial, _wire
from .._runtime.values._context import context
from ._backend import LocalRegion, PeerIdentity, RdmaBackend, settle
from ._deadline import Deadlines
from ._memory import Memory, view_at

__all__ = ["RdmaService", "rdma_service"]

_log = get_logger("rdma")
SERVICE = "rdma"
_RELEASED_KEPT = 4096  # why a buffer was released is remembered for this many of the latest ones
#: What to do about a backend that failed to start in this process (it is not tried again here).
_START_REMEDY = "fix what its error names, then start a new process; `tetrarch doctor rdma` shows the probes"
OpHandler = Callable[[_wire.SysHeader, list], None]


@dataclass(slots=True)
class _Entry:
    """One registered buffer at its owner."""

    buffer_id: int
    address: int
    nbytes: int
    readonly: bool
    alive: Callable[[], object | None]  # the memory's owner object, or None once it is freed
    actor_key: str  # the actor that registered it ("" for the client or a proc's main thread)
    contexts: dict[str, object]
    finalizer: weakref.finalize | None


class _Host:
    """The :class:`RdmaHost` one backend gets."""

    def __init__(self, service: RdmaService, name: str) -> None:
        self.service = service
        self.name = name

    @property
    def identity(self) -> PeerIdentity:
        return self.service.identity

    def lookup(self, buffer_id: int, offset: int, nbytes: int) -> LocalRegion:
        return self.service.lookup(buffer_id, offset, nbytes, self.name)

    def call(self, owner: str, request: object, timeout: float) -> CFuture[object]:
        return self.service.request(owner, "call", (self.name, request), timeout)


class RdmaService:
    """This process's RDMA state."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.identity = PeerIdentity.here(router.address)
        self.deadlines = Deadlines()
        self.pool = ThreadPoolExecutor(8, thread_name_prefix="tetrarch-rdma")
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._entries: dict[int, _Entry] = {}
        self._by_key: dict[tuple[int, int], int] = {}
        self._released: OrderedDict[int, str] = OrderedDict()  # recently released buffer id -> why (bounded)
        self._backends: dict[str, RdmaBackend] = {}
        self._failed: dict[str, str] = {}
        self._ops: dict[str, OpHandler] = {"call": self._on_call, "drop": self._on_drop, "ping": lambda h, f: None}
        self._pending: dict[str, set[Callable[[BaseException], None]]] = {}
        self._refused: dict[str, str] = {}  # owner address -> why it refused this process (another allocation)
        router.add_service(SERVICE, self._dispatch)
        router.on_peer_lost(lambda peer, _err: self.owner_died(peer, f"lost the connection to {peer}"))

    # ------------------------------------------------------------ backends
    def backend(self, name: str) -> RdmaBackend:
        """The started backend ``name`` (created through the plugin registry).

        Raises:
            BackendNotFound, BackendUnavailable: from the registry, or the backend failed to start.
        """
        with self._lock:
            found = self._backends.get(name)
        if found is not None:
            return found
        from .._plugins import BackendUnavailable

        if name in self._failed:
            raise BackendUnavailable(self._failed[name], kind=BackendKind.RDMA, name=name, reason=self._failed[name],
                                     remedy=_START_REMEDY)
        instance = get_registry().create(BackendKind.RDMA, name)
        if not isinstance(instance, RdmaBackend):
            raise BackendUnavailable(f"RDMA backend {name!r} built a {type(instance).__qualname__}, which is no "
                                     f"tetrarch.plugins.RdmaBackend; a bug in its plugin", kind=BackendKind.RDMA,
                                     name=name, reason=f"its factory built a {type(instance).__qualname__}",
                                     remedy="a bug in its plugin; report it")
        with self._lock:
            if name in self._backends:
                return self._backends[name]
            try:
                instance.start(_Host(self, name))
            except Exception as exc:
                self._failed[name] = f"RDMA backend {name!r} failed to start here: {type(exc).__name__}: {exc}"
                raise BackendUnavailable(self._failed[name], kind=BackendKind.RDMA, name=name,
                                         reason=self._failed[name], remedy=_START_REMEDY) from exc
            self._backends[name] = instance
        return instance

    def add_op(self, op: str, handler: OpHandler) -> None:
        """Serve ``op`` of the ``rdma`` service with ``handler(header, frames)`` (I/O thread)."""
        self._ops[op] = handler

    # ------------------------------------------------------------ registrations
    def register(self, memory: Memory, names: list[str]) -> tuple[int, dict[str, object]]:
        """Register ``memory`` with the backends ``names`` (those that fail are left out), or find
        its registration (same address and size). Returns ``(buffer id, {backend: context})``.

        Raises:
            BackendUnavailable: no backend could register it (the message has each one's reason).
        """
        region = memory.region
        self._sweep()
        key = (region.address, region.nbytes)
        with self._lock:
            known = self._by_key.get(key) if region.address else None
            entry = self._entries.get(known) if known is not None else None
            if entry is not None and entry.alive() is not None:
                return entry.buffer_id, dict(entry.contexts)
            buffer_id = next(self._ids)
        contexts: dict[str, object] = {}
        reasons = []
        for name in names:
            try:
                backend = self.backend(name)
                if region.kind not in backend.memory_kinds:
                    reasons.append(f"{name}: cannot register {region.kind.value} memory")
                    continue
                contexts[name] = backend.register(region, buffer_id)
            except Exception as exc:  # noqa: BLE001 - that backend is left out, with its reason
                reasons.append(f"{name}: {exc}")
        if not contexts:
            from .._plugins import BackendUnavailable

            raise BackendUnavailable("no RDMA backend could register this memory: " + "; ".join(reasons),
                                     kind=BackendKind.RDMA, reason="; ".join(reasons),
                                     remedy="see each backend's reason; `tetrarch doctor rdma` shows their probes")
        alive, finalizer = _lifetime(memory.root, lambda: self.deregister(buffer_id, "its memory was freed"))
        entry = _Entry(buffer_id, region.address, region.nbytes, region.view is None or region.view.readonly,
                       alive, context().actor_instance.key, contexts, finalizer)
        with self._lock:
            self._entries[buffer_id] = entry
            if region.address:
                self._by_key[key] = buffer_id
        return buffer_id, dict(contexts)

    def deregister(self, buffer_id: int, why: str = "dropped") -> bool:
        """Release buffer ``buffer_id`` in every backend; False if it was not registered."""
        with self._lock:
            entry = self._entries.pop(buffer_id, None)
            if entry is None:
                return False
            if self._by_key.get((entry.address, entry.nbytes)) == buffer_id:
                del self._by_key[(entry.address, entry.nbytes)]
            self._released[buffer_id] = why
            while len(self._released) > _RELEASED_KEPT:
                self._released.popitem(last=False)
            backends = [self._backends[n] for n in entry.contexts if n in self._backends]
        if entry.finalizer is not None:
            entry.finalizer.detach()
        for backend in backends:
            try:
                backend.deregister(buffer_id)
            except Exception:  # noqa: BLE001 - deregister must not raise; log and go on
                _log.exception("RDMA backend %s failed to deregister buffer %d", type(backend).__name__, buffer_id)
        _log.debug("RDMA buffer %d released: %s", buffer_id, why)
        return True

    def actor_gone(self, actor_key: str) -> None:
        """Release at once the buffers the actor ``actor_key`` registered (it stopped)."""
        with self._lock:
            gone = [e.buffer_id for e in self._entries.values() if e.actor_key == actor_key]
        for buffer_id in gone:
            self.deregister(buffer_id, "the actor that created it stopped")

    def registered(self) -> list[int]:
        """The ids of the buffers registered here now."""
        with self._lock:
            return sorted(self._entries)

    def _sweep(self) -> None:
        """Release the buffers of actors that stopped (a safety net behind :meth:`actor_gone`)."""
        mailboxes = self.router.mailboxes
        with self._lock:
            gone = [e.buffer_id for e in self._entries.values() if e.actor_key and e.actor_key not in mailboxes]
        for buffer_id in gone:
            self.deregister(buffer_id, "its actor stopped")

    def lookup(self, buffer_id: int, offset: int, nbytes: int, backend: str) -> LocalRegion:
        """Owner side: check a request against the table (see ``RdmaHost.lookup``).

        Raises:
            RDMAError: unknown or dropped buffer, not registered with ``backend``, memory freed,
                owning actor stopped, or the range outside the buffer.
        """
        entry = self._entries.get(buffer_id) if type(buffer_id) is int else None
        if entry is not None and entry.actor_key and entry.actor_key not in self.router.mailboxes:
            self.deregister(buffer_id, "its actor stopped")
            raise RDMAError(f"RDMA buffer {buffer_id} at {self.identity.address} was released: the actor that "
                            f"created it stopped")
        released = self._released.get(buffer_id) if entry is None and type(buffer_id) is int else None
        if released is not None:
            raise RDMAError(f"RDMA buffer {buffer_id} at {self.identity.address} was released ({released}); ask "
                            f"its owner for a fresh RDMABuffer")
        if entry is None or backend not in entry.contexts:
            raise RDMAError(f"no RDMA buffer {buffer_id!r} at {self.identity.address} (dropped, never registered "
                            f"there with {backend!r}, or a forged handle); ask its owner for a fresh RDMABuffer")
        if not (type(offset) is int and type(nbytes) is int and offset >= 0 and nbytes > 0
                and offset + nbytes <= entry.nbytes):
            raise RDMAError(f"refused an access of {nbytes!r} bytes at offset {offset!r} of RDMA buffer {buffer_id} "
                            f"({entry.nbytes} bytes): outside the registered region")
        root = entry.alive()
        if root is None:
            self.deregister(buffer_id, "its memory was freed")
            raise RDMAError(f"RDMA buffer {buffer_id} at {self.identity.address} was released: its memory was freed")
        address = entry.address + offset
        return LocalRegion(address, nbytes, view_at(address, nbytes, root))

    def readonly(self, buffer_id: int) -> bool:
        entry = self._entries.get(buffer_id)
        return entry is not None and entry.readonly

    # ------------------------------------------------------------ requests between processes
    def request(self, owner: str, op: str, payload: object, timeout: float) -> CFuture[Any]:
        """Send ``op`` with ``payload`` to the ``rdma`` service at ``owner``; a future of the reply."""
        fut: CFuture[Any] = CFuture()
        router = self.router
        port = 0

        def on_reply(hdr: _wire.PortHeader, frames: list) -> None:
            router.close_port(port)
            if hdr.status == _wire.OK:
                fut.set_result(_serial.loads(frames)) if not fut.done() else None
            elif not fut.done():
                error = _serial.loads(frames)
                fut.set_exception(error if isinstance(error, BaseException) else SupervisionError(str(error)))

        port = router.open_port(on_reply)
        self.watch(owner, fut)
        self.deadlines.fail_after(fut, timeout, f"RDMA request {op!r} to {owner}")
        fut.add_done_callback(lambda _f: router.close_port(port))
        error = self.send(owner, [_wire.sys_header(SERVICE, op, router.address, port), *_serial.dumps(payload)])
        if error is not None:
            settle(fut, error)
        return fut

    def send(self, owner: str, frames: list) -> BaseException | None:
        """Send ``frames`` to ``owner``; None, or the error a transfer to it fails with: an
        :class:`RDMAError` when the owner refused this process (it is not of the buffer's
        allocation), a :class:`SupervisionError` when it cannot be reached. Never raises."""
        try:
            self.router.send(owner, frames)
            return None
        except PeerUnreachable as exc:
            return self.unreachable(owner, str(exc))

    def unreachable(self, owner: str, why: str) -> BaseException:
        """The error for ``owner`` that could not be reached (``why``: the router's words).

        A handshake that the owner ended, or that failed its proof, is a refusal: the owner
        and this process are of different allocations. A handshake the owner never answered
        is a :class:`SupervisionError` that says so.
        """
        refused = self._refused.get(owner)
        if refused is None and ("closed the connection during the authentication handshake" in why
                                or "failed the authentication handshake" in why):
            refused = self._refused[owner] = (
                f"the owner of the RDMA buffer at {owner} refused this process: it is not of the buffer's allocation "
                f"({why}); only processes of the allocation that made the buffer can read or write it: pass the "
                f"data through one of them")
        if refused is not None:
            return RDMAError(refused)
        if "did not answer the authentication handshake" in why:
            return SupervisionError(f"the owner of the RDMA buffer at {owner} did not answer: {why}")
        return SupervisionError(f"the owner of the RDMA buffer at {owner} is unreachable: {why}")

    def _dispatch(self, hdr: _wire.SysHeader, frames: list, _conn: object) -> None:
        handler = self._ops.get(hdr.op)
        if handler is None:
            self.router.reply_later(hdr.reply_addr, hdr.reply_port, 0, _wire.ERR,
                                    RDMAError(f"unknown RDMA op {hdr.op!r}"))
            return
        try:
            handler(hdr, frames)
        except Exception as exc:  # noqa: BLE001 - the requester gets the error
            self.router.reply_later(hdr.reply_addr, hdr.reply_port, 0, _wire.ERR, exc)

    def _on_call(self, hdr: _wire.SysHeader, frames: list) -> None:
        name, request = _serial.loads(frames)

        def run() -> None:
            try:
                value, status = self.backend(name).on_request(hdr.reply_addr or "", request), _wire.OK
            except Exception as exc:  # noqa: BLE001 - travels back to the caller
                value, status = exc, _wire.ERR
            self.router.reply(hdr.reply_addr, hdr.reply_port, 0, status, value)

        self.pool.submit(run)

    def _on_drop(self, hdr: _wire.SysHeader, frames: list) -> None:
        buffer_id = _serial.loads(frames)
        self.pool.submit(lambda: self.router.reply(hdr.reply_addr, hdr.reply_port, 0, _wire.OK,
                                                   self.deregister(buffer_id) if type(buffer_id) is int else False))

    # ------------------------------------------------------------ owners' deaths
    def watch(self, owner: str, fut: CFuture[Any]) -> None:
        """Fail ``fut`` with SupervisionError if the process at ``owner`` dies before it is done."""
        if self.router.is_local(owner):
            return

        def fail(exc: BaseException) -> None:
            settle(fut, exc)

        with self._lock:
            self._pending.setdefault(owner, set()).add(fail)
        token = self.router.watch(owner, lambda why: self.owner_died(owner, why))

        def done(_f: CFuture[Any]) -> None:
            with self._lock:
                waiting = self._pending.get(owner)
                if waiting is not None:
                    waiting.discard(fail)
                    if not waiting:
                        del self._pending[owner]
            self.router.unwatch(owner, token)

        fut.add_done_callback(done)

    def owner_died(self, owner: str, why: str) -> None:
        """Fail the transfers waiting on ``owner``, which died (or refused this process: then
        they fail with that refusal, see :meth:`unreachable`)."""
        with self._lock:
            waiting = self._pending.pop(owner, set())
        refused = owner in self._refused or "authentication handshake" in why
        error = self.unreachable(owner, why) if refused else None
        for fail in waiting:
            fail(error or SupervisionError(f"the owner of the RDMA buffer ({owner}) died during the transfer: {why}"))

    def close(self) -> None:
        with self._lock:
            ids = list(self._entries)
            backends = list(self._backends.values())
        for buffer_id in ids:
            self.deregister(buffer_id, "the process's RDMA service closed")
        for backend in backends:
            try:
                backend.close()
            except Exception:  # noqa: BLE001 - must not raise
                _log.exception("closing RDMA backend %s failed", type(backend).__name__)
        self.deadlines.close()
        self.pool.shutdown(wait=False)


def _lifetime(root: object, release: Callable[[], object]
              ) -> tuple[Callable[[], object | None], weakref.finalize | None]:
    """``(alive, finalizer)``: ``alive()`` is the root while it lives; ``release`` runs when it is collected.

    A root that takes no weak reference (bytearray, bytes) is held strongly until the buffer is dropped.
    """
    try:
        ref = weakref.ref(root)
    except TypeError:
        return (lambda: root), None
    return ref, weakref.finalize(root, release)


_service: RdmaService | None = None
_service_lock = threading.Lock()


def rdma_service() -> RdmaService:
    """This process's RDMA service (starting the client's router and services if needed)."""
    global _service
    root = get_root()
    with _service_lock:
        if _service is None or _service.router is not root.router:
            _service = RdmaService(root.router)
            root.proc_service.on_actor_gone(_service.actor_gone)
            root.on_close(_service.close)  # also before a proc's hard exit (os._exit skips atexit)
        return _service
