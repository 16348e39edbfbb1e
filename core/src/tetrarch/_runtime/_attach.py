"""``attach_to_workers``: a ``HostMesh`` over workers that something else started (Monarch's name).

The workers run ``run_worker_loop_forever`` (:mod:`._worker`). The client starts its
runtime with the secret of the same secret file (or checks that it runs with it) and
on the workers' transport, dials each worker (the mutual HMAC handshake proves both
sides hold the secret before anything is unpickled) and asks it to serve; the worker
answers like a host agent that reports ready, pings the client from then on, and is
tracked as one (``TETRARCH_HOST_TIMEOUT``, exit reports). ``HostMesh.shutdown()`` ends
the session: the worker kills the procs and waits for its next client.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .._config import CONNECT_TIMEOUT, HOST_START_TIMEOUT, TRANSPORT, configured
from .._errors import ArgumentError, ArgumentTypeError, ProcessStartError
from .._plugins import get_registry
from .._plugins._specs import BackendKind
from .._transport._base import TransportError
from .._transport._route import host_of, source_ip_toward
from . import _serial, _wire
from ._alloc import Allocation
from ._future import Future
from ._launch import ProcRecord
from ._procmesh import HostMesh, _Host, _uid
from ._root import Root, get_root, root_if_any, use_secret
from ._router import PeerUnreachable
from ._shape import Extent, Shape
from ._workerauth import check_address, check_tls, is_loopback, read_secret_file

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


def _client_root(address: str, secret: bytes, origin: str) -> Root:
    """This process's runtime, started (or checked) for workers at ``address`` holding ``secret``.

    Raises:
        SecretError: the runtime already runs with another secret.
        TransportError: it already runs on a transport the workers do not speak.
    """
    use_secret(secret, origin)
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
    host = host_of(address)
    if not is_loopback(address):  # the worker and its procs must reach us
        root.runtime.listen_routable(source_ip_toward(host))
    return root


def _attach_one(root: Root, address: str, ident: str, timeout: float) -> _wire.ProcReady:
    """Ask the worker at ``address`` to serve this client; its ready record.

    Raises:
        ProcessStartError: it is unreachable, refused the handshake (another secret), serves
            another client, or did not answer within ``timeout``.
    """
    rt = root.runtime
    answer: list[Any] = []
    done = threading.Event()

    def on_reply(hdr: _wire.PortHeader, payload: list) -> None:
        answer.append((hdr.status, _serial.loads(payload)))
        done.set()

    port = rt.open_port(on_reply)
    what = f"worker at {address}"
    try:
        rt.revive(address)  # a worker we detached from before serves again
        try:
            rt.send(address, [_wire.sys_header(_wire.SVC_WORKER, "attach", rt.address, port),
                              *_serial.dumps(_wire.WorkerAttach(rt.address, ident))])
        except PeerUnreachable as exc:
            raise ProcessStartError(what, None, "", f"attach failed: {exc}") from None
        if not done.wait(timeout):
            raise ProcessStartError(what, None, "", f"attach failed: no answer within {timeout:g} s "
                                                    f"(TETRARCH_HOST_START_TIMEOUT)")
    finally:
        rt.close_port(port)
    status, value = answer[0]
    if status != _wire.OK or not isinstance(value, _wire.ProcReady):
        raise ProcessStartError(what, None, "", f"attach failed: {value}")
    return value


def _attach_all(mesh: _AttachedHostMesh, root: Root | None, addresses: list[Any], secret: bytes,
                origin: str) -> None:
    """Attach ``mesh`` to its workers (a thread); completes ``mesh._attached``.

    ``root`` is None when every address was a future: the runtime is started (or checked)
    once the first one resolved.
    """
    alloc_id = _uid("attach")
    records: list[ProcRecord] = []
    try:
        resolved = [a.get() if isinstance(a, Future) else a for a in addresses]
        for a in resolved:
            check_address(a, "attach_to_workers")
        if root is None:
            root = _client_root(resolved[0], secret, origin)
        timeout = max(HOST_START_TIMEOUT(), CONNECT_TIMEOUT())
        idents = [f"{alloc_id}/{i}" for i in range(len(resolved))]
        with ThreadPoolExecutor(max_workers=min(len(resolved), 32)) as pool:
            readies = list(pool.map(lambda a, i: _attach_one(root, a, i, timeout), resolved, idents))
    except BaseException as exc:  # noqa: BLE001 - the mesh's initialized future carries it
        mesh._attached._set_exception(exc)
        return
    for ready, address in zip(readies, resolved, strict=True):
        records.append(ProcRecord(ready.ident, f"worker at {address}", kind="host agent"))
    root.launches.expect(records)
    for ready in readies:
        root.launches.ready(ready.ident, ready.address, ready.pid, ready.hostname, ready.heartbeat_s, ready.frozen_s)
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
    file the workers were given; the client's runtime starts with its secret (so call
    this before anything else uses tetrarch in this process) or must already hold it.
    ``HostMesh.shutdown()`` (also at exit) stops the procs and releases the workers for
    their next client; they keep running.

    Raises:
        ArgumentError: ``ca="trust_all_connections"`` (tetrarch requires the secret), no
            workers, or a wildcard / alias address.
        NotSupportedError: TLS arguments.
        SecretError: no usable secret file, or this process already runs with another secret.
        TransportError: this process already runs a transport the workers do not speak.
        (When every worker is a future, the last two and a bad resolved address come from
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
    origin = f"secret_file={os.fspath(secret_file)!r}"  # type: ignore[arg-type]
    first = next((a for a in addresses if isinstance(a, str)), None)
    root = _client_root(first, secret, origin) if first is not None else None  # else once a future resolved
    mesh = _AttachedHostMesh(Shape(Extent([HOSTS_DIM], [len(addresses)])), name or HOSTS_DIM)
    threading.Thread(target=_attach_all, args=(mesh, root, addresses, secret, origin), name="tetrarch-attach",
                     daemon=True).start()
    return mesh
