"""``attach_to_workers``: a ``HostMesh`` over workers that something else started (Monarch's name).

The workers run ``run_worker_loop_forever`` (:mod:`._worker`). The client's runtime
keeps its own random secret (it may run already, e.g. for ``this_host()``) and must be on
the workers' transport. For each worker a helper router keyed with the worker secret of
the secret file dials it (the mutual HMAC handshake proves both sides hold that secret
before anything is unpickled) and sends the client's address and its own secret, sealed
(:func:`~._worker_auth.seal_secret`); then the helper closes. The worker re-keys with the
client's secret at the same address and reports ready like an allocated host agent,
pings the client from then on, and is tracked as one (``TETRARCH_HOST_TIMEOUT``, exit
reports); its procs hold the client's secret, so they talk to the client's other procs.
``HostMesh.shutdown()`` ends the session: the worker kills the procs and is idle again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..._config import CONNECT_TIMEOUT, HOST_START_TIMEOUT, TRANSPORT, configured
from ..._errors import ArgumentError, ArgumentTypeError, ProcessStartError
from ..._plugins import get_registry
from ..._plugins._specs import BackendKind
from ..._transport._backoff import Backoff
from ..._transport._base import TransportError
from ..._transport._route import host_of, pin_host, source_ip_toward
from ..plumbing._alloc import Allocation
from ..process._root import Root, get_root, root_if_any
from ..router._router import PeerRefused, PeerUnreachable, Router
from ..services._launch import ProcRecord
from ..values import _serial, _wire
from ..values._future import Future
from ..values._shape import Extent, Shape
from ._proc_mesh import HostMesh, _Host, _uid
from ._worker_auth import check_address, check_tls, fresh_transport, is_loopback, read_secret_file, seal_secret

__all__ = ["attach_to_workers"]

#: The dimension of an attached mesh (Monarch's ``{"hosts": N}``).
HOSTS_DIM = "hosts"


class _Attachment(Allocation):
    """What an attached mesh holds instead of an allocation: its workers outlive it."""

    def stop(self, grace: float = 5.0) -> None:
        """Nothing to end: ``HostMesh.shutdown()`` already ended the sessions (the workers live on)."""


class _AttachedHostMesh(HostMesh):
    """A ``HostMesh`` whose hosts are attached workers; usable once the attach completed."""

    def __init__(self, shape: Shape, name: str) -> None:
        super().__init__(shape, None, allocator="attached", owned=True, name=name)
        self._attached: Future[None] = Future._new()

    def _ensure_started(self) -> list[_Host]:
        if self._origin is self:
            self._attached.get()  # raises why the attach failed
        return super()._ensure_started()

    def __repr__(self) -> str:
        return f"<HostMesh {self.extent!r} attached>"


def _client_root(address: str) -> Root:
    """This process's runtime, started (or checked) for workers at ``address``; it keeps its own secret.

    Raises:
        TransportError: it already runs on a transport the workers do not speak.
    """
    spec = get_registry().select(BackendKind.TRANSPORT, TRANSPORT(), address=address)
    root = root_if_any()
    if root is None:
        with configured(transport=spec.name):
            root = get_root()
    if root.transport_name != spec.name:
        raise TransportError(
            f"this process's tetrarch runtime already runs the {root.transport_name!r} transport, but the workers at "
            f"{address} speak {spec.name!r}: attach before anything else uses tetrarch in this process, or start it "
            f"with TETRARCH_TRANSPORT={spec.name}")
    if not is_loopback(address):  # the worker and its procs must reach us
        root.router.listen_routable(source_ip_toward(host_of(address)))
    return root


def _ask(root: Root, address: str, ident: str, worker_secret: bytes, timeout: float) -> None:
    """Ask the idle worker at ``address`` to serve this client, from a router keyed with ``worker_secret``.

    The worker gets this runtime's address and its secret, sealed; once it answered OK it
    re-keys and reports ready to this runtime (``root.launches``) under ``ident``.

    Raises:
        ProcessStartError: nothing answered at ``address`` within ``timeout`` (dialled again
            meanwhile: a worker just started may not listen yet), it refused the handshake
            (another secret, or it serves another client), refused the request, or did not
            answer within ``timeout``.
    """
    what = f"worker at {address}"
    answer: list[Any] = []
    done = threading.Event()

    def on_reply(hdr: _wire.PortHeader, payload: list) -> None:
        answer.append((hdr.status, _serial.loads(payload)))  # the worker proved it holds the secret
        done.set()

    transport = fresh_transport(root.transport_name)
    spans = not is_loopback(address)  # the address it claims in the handshake is one the worker could reach
    listen = pin_host(transport.default_address(spans_hosts=True), source_ip_toward(host_of(address))) if spans \
        else None
    try:
        helper = Router(transport, worker_secret, name="attach", spans_hosts=spans, listen_address=listen,
                        lead_waiters=False)
    except BaseException:
        transport.close()
        raise
    try:
        port = helper.open_port(on_reply)
        sealed = seal_secret(worker_secret, root.secret)
        request = _wire.WorkerAttach(root.router.address, ident, *sealed)
        backoff = Backoff(timeout, first=0.05, cap=0.5)
        while True:  # a worker started a moment ago (Popen, then attach) may not listen yet: try again
            try:
                helper.send(address, [_wire.sys_header(_wire.SVC_WORKER, "attach", helper.address, port),
                                      *_serial.dumps(request)])
                break
            except PeerRefused:
                raise ProcessStartError(what, None, "", f"attach failed: the worker at {address} refused the "
                                                        f"handshake: it holds another secret, or it serves another "
                                                        f"client right now") from None
            except PeerUnreachable as exc:
                if not backoff.wait():
                    raise ProcessStartError(what, None, "", f"attach failed: nothing answered there for {timeout:g} s "
                                                            f"(TETRARCH_HOST_START_TIMEOUT): {exc}") from None
                helper.revive(address)
        if not done.wait(backoff.left()):
            raise ProcessStartError(what, None, "", f"attach failed: no answer within {timeout:g} s "
                                                    f"(TETRARCH_HOST_START_TIMEOUT)")
    finally:
        helper.close()
        transport.close()
    status, value = answer[0]
    if status != _wire.OK:
        raise ProcessStartError(what, None, "", f"attach failed: {value}")


def _release(root: Root, records: list[ProcRecord], accepted: list[ProcRecord], timeout: float) -> None:
    """The attach failed: end the sessions of the workers that accepted (once they reported ready,
    within ``timeout``) and stop tracking every one of ``records``."""
    if accepted:
        try:
            root.launches.expect(accepted).wait(timeout)
        except ProcessStartError:
            pass  # those not ready are dropped; a worker whose client stops answering ends the session itself
    for rec in accepted:
        if rec.ready and not rec.gone:
            try:
                root.router.send(rec.address, [_wire.sys_header(_wire.SVC_HOST, "shutdown")])
            except PeerUnreachable:
                pass
    for rec in records:
        root.launches.forget(rec.ident)


def _attach_all(mesh: _AttachedHostMesh, root: Root | None, addresses: list[Any], secret: bytes) -> None:
    """Attach ``mesh`` to its workers (a thread); completes ``mesh._attached``.

    ``root`` is None when every address was a future: the runtime is started (or checked)
    once the first one resolved.
    """
    alloc_id = _uid("attach")
    records: list[ProcRecord] = []
    accepted: list[ProcRecord] = []
    timeout = max(HOST_START_TIMEOUT(), CONNECT_TIMEOUT())
    try:
        resolved = [a.get() if isinstance(a, Future) else a for a in addresses]
        for a in resolved:
            check_address(a, "attach_to_workers")
        if root is None:
            root = _client_root(resolved[0])
        records = [ProcRecord(f"{alloc_id}/{i}", f"worker at {a}", kind="host agent") for i, a in enumerate(resolved)]
        waiter = root.launches.expect(records)  # before asking: a worker reports ready as soon as it accepted
        with ThreadPoolExecutor(max_workers=min(len(resolved), 32)) as pool:
            asked = [pool.submit(_ask, root, a, r.ident, secret, timeout) for a, r in zip(resolved, records,
                                                                                            strict=True)]
        accepted = [r for r, f in zip(records, asked, strict=True) if f.exception() is None]
        for f in asked:
            if f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        waiter.wait(timeout)
    except BaseException as exc:  # noqa: BLE001 - the mesh's initialized future carries it
        if root is not None:
            _release(root, records, accepted, timeout)
        mesh._attached._set_exception(exc)
        return
    with mesh._lock:
        mesh._host_records = records
        mesh._allocation = _Attachment()
        mesh._hosts = [_Host(r.address, r.hostname, r.pid) for r in records]
    mesh._attached._set_result(None)


def attach_to_workers(*, workers: Sequence[str | Future[str]], name: str | None = None, ca: Any = None,
                      private_key: Any = None, secret_file: str | os.PathLike[str] | None = None) -> HostMesh:
    """A ``HostMesh`` (dimension ``hosts``) over workers running ``run_worker_loop_forever``.

    Returns at once; the attach runs meanwhile: ``mesh.initialized`` completes (or raises
    ``ProcessStartError`` naming the worker, "attach failed: ...") when every worker
    accepted, and ``spawn_procs`` waits for it. ``workers`` are addresses as the workers
    were given (``tcp://10.0.0.2:26600``) or futures of them. ``secret_file`` is the
    file the workers were given: it proves to them that this client may attach, and
    seals this client's own secret for them (the runtime keeps its own random secret, so
    this works whether or not this process already uses tetrarch, e.g. ``this_host()``).
    A worker that serves another client now refuses the handshake. ``HostMesh.shutdown()``
    (also at exit) stops the procs and releases the workers for their next client; they
    keep running.

    Raises:
        ArgumentError: ``ca="trust_all_connections"`` (tetrarch requires the secret), no
            workers, or a wildcard / alias address.
        NotSupportedError: TLS arguments.
        SecretError: no usable secret file.
        TransportError: this process already runs a transport the workers do not speak.
        (When every worker is a future, that one and a bad resolved address come from
        ``initialized`` instead.)
    """
    who = "attach_to_workers"
    check_tls(ca, private_key, who)
    if isinstance(workers, str) or not isinstance(workers, Sequence) or not workers:
        raise ArgumentError(f"{who}(workers=...) takes a non-empty list of worker addresses, e.g. "
                            f"['tcp://10.0.0.2:26600'], got {workers!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise ArgumentTypeError(f"{who}(name=...) must be a non-empty string, got {name!r}")
    addresses = list(workers)
    for a in addresses:
        if not isinstance(a, Future):
            check_address(a, who)
    secret = read_secret_file(secret_file, who)
    first = next((a for a in addresses if isinstance(a, str)), None)
    root = _client_root(first) if first is not None else None  # else once a future resolved
    mesh = _AttachedHostMesh(Shape(Extent([HOSTS_DIM], [len(addresses)])), name or HOSTS_DIM)
    threading.Thread(target=_attach_all, args=(mesh, root, addresses, secret), name="tetrarch-attach",
                     daemon=True).start()
    return mesh
