"""The one module that wires a process together: the client's (created lazily), a proc's, a host agent's.

Every process that takes part in a mesh has exactly one :class:`Root`: its router, the
allocation secret, and the services handed that router — launches (the processes this
one started), supervision, the actors of this process, and ports. User-facing meshes
sit above this layer and reach it through :func:`get_root`.
"""

from __future__ import annotations

import atexit
import os
import secrets
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..._client_hooks import client_started
from ..._config import (
    ENV_ALLOC_TRANSPORT,
    ENV_CLIENT_ADDR,
    ENV_HOST_AGENT_ADDR,
    ENV_OWNER_ADDR,
    ENV_SPANS_HOSTS,
    ENV_SYS_PATH,
    LISTEN_ADDRESS,
    TRANSPORT,
    at_default,
    config_env,
)
from ..._log import get_logger, set_process_name
from ..._plugins import BackendNotFound, BackendUnavailable, Registry, get_registry, known_backend, split_address
from ..._plugins._specs import BackendKind
from ..._transport._route import host_of, pin_host, source_ip_toward
from ..actors._proc_service import ProcService
from ..router._router import Router, install_router
from ..services._client_exit import install_exit_path
from ..services._launch import LaunchTracker
from ..services._output import OutputPrinter
from ..services._port import link_service
from ..services._supervision import Supervisor
from ..services._telemetry import start_telemetry, telemetry_env

__all__ = ["Root", "adopt_client_sys_path", "child_env", "get_root", "install_root", "launched_root",
           "native_address", "on_client_exit", "root_if_any"]

_log = get_logger("supervision")

_root: Root | None = None
_lock = threading.Lock()


class Root:
    """This process's runtime and bookkeeping."""

    def __init__(self, role: str, secret: bytes, transport_name: str | None, name: str,
                 on_proc_exit: Callable[[], None] | None = None, *, listen_address: str | None = None,
                 own_transport: bool = False) -> None:
        """``own_transport``: a transport instance of its own, closed with the root (a worker's
        session: the process's shared instance is keyed once, see ``Transport.use_key``)."""
        self.role = role
        self.secret = secret
        # The client may be told where to listen; a qualified scheme there selects the transport.
        # (A worker of run_worker_loop_forever listens where its user said: ``listen_address``.)
        address = listen_address or (LISTEN_ADDRESS() if role == "client" else None)
        spec = get_registry().select(BackendKind.TRANSPORT, transport_name, address=address)
        self.transport_name = spec.name
        transport: Any = get_registry().create(BackendKind.TRANSPORT, spec.name, fresh=own_transport)
        self._own_transport = own_transport
        set_process_name(name)
        spans_hosts = role != "client" and os.environ.get(ENV_SPANS_HOSTS.name) == "1"
        if spans_hosts and listen_address is None:  # listen on the interface that reaches our launcher
            launcher = os.environ.get((ENV_CLIENT_ADDR if role == "host" else ENV_OWNER_ADDR).name)
            address = pin_host(transport.default_address(spans_hosts=True), source_ip_toward(host_of(launcher)))
        self.router = Router(transport, secret, name=name, spans_hosts=spans_hosts,
                              listen_address=native_address(transport, address) if address else None,
                              relays=role == "host")
        self.launches = LaunchTracker(self.router)
        self.supervisor = Supervisor(self.router, role)
        # before the proc service: metrics start there, and the store's reader must be in by then
        self.telemetry = start_telemetry(role, self.router, os.environ.get(ENV_HOST_AGENT_ADDR.name))
        self.proc_service = ProcService(self.router, on_exit=on_proc_exit, role=role)
        link_service(self.router)
        self.output = OutputPrinter(self.router)  # the output of procs this process started
        self.host_agent_address = os.environ.get(ENV_HOST_AGENT_ADDR.name) if role == "proc" else None
        self.closed = False
        self._on_close: list[Callable[[], None]] = []

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when this root closes, before its router does (layers above release what
        they hold: the RDMA runtime closes its backends, whose endpoints a hard exit would leak)."""
        self._on_close.append(fn)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.telemetry is not None:
                self.telemetry.close()  # its last rows go to the host agent, or to disk
            for fn in reversed(self._on_close):
                try:
                    fn()
                except Exception:  # noqa: BLE001 - closing must go on
                    _log.exception("a close handler of this process failed")
            self.router.close()
            if self._own_transport:
                self.router.transport.close()


def native_address(transport: Any, address: str) -> str:
    """``address`` as ``transport`` listens on it: without the qualifier (``zmq+tcp://h:1`` ->
    ``tcp://h:1``), since a transport's schemes are bare ones (``TransportSpec.schemes``); as
    given only for a transport whose class still lists a qualified scheme (``zmq+tcp``, as
    plugins of plugin API 1.1 could)."""
    scheme = address.split("://", 1)[0]
    return address if scheme in transport.schemes else Registry.strip_scheme(address)


def child_env(root: Root, extra: dict[str, str]) -> dict[str, str]:
    """Environment for a process this one starts: ours, the settings made from code
    (``tetrarch.configure``) and the transport in use.

    Never the allocation's secret: the starter passes ``root.secret`` apart from the
    environment (``spawn_watched(..., secret=...)``, ``AgentCommand.secret``)."""
    env = dict(os.environ)
    env.update(config_env())
    env.update(telemetry_env())
    env[ENV_ALLOC_TRANSPORT.name] = root.transport_name  # what the child uses (launched_root)
    env[TRANSPORT.env] = root.transport_name  # what code running in the child sees as the setting
    env.setdefault(ENV_SYS_PATH.name, os.pathsep.join(p for p in sys.path if p))
    env.update(extra)
    return at_default(env)


def launched_root(role: str, secret: bytes, name: str, launcher: str, what: str,
                  on_proc_exit: Callable[[], None] | None = None) -> Root:
    """The :class:`Root` of a host agent or proc: on the allocation's transport, checked against ``launcher``.

    The transport is the one its launcher passed down (``TETRARCH_ALLOC_TRANSPORT``;
    the ``transport`` setting only for a launcher that passed none), never one chosen
    again here, so every process of an allocation speaks the client's transport.
    ``launcher`` is the address it reports to (its client or owner); ``what`` names
    this process in errors (``"host agent 0"``).

    Raises:
        BackendNotFound, BackendUnavailable: this process cannot load that transport, or
            it cannot dial ``launcher``'s address; the message names the transport, who
            chose it and, for a first-party one, the ``pip install "tetrarch[X]"`` that
            provides it on this host.
    """
    chosen = os.environ.get(ENV_ALLOC_TRANSPORT.name) or TRANSPORT()
    origin = f"the allocation's transport ({ENV_ALLOC_TRANSPORT.name}={chosen}, the client's choice)"
    try:
        spec = get_registry().select(BackendKind.TRANSPORT, chosen)
    except (BackendNotFound, BackendUnavailable) as exc:
        known = known_backend(BackendKind.TRANSPORT, chosen) if chosen else None
        fix = f"; install it on this host: {known.hint}" if known is not None and known.implemented else ""
        raise type(exc)(f"{what} cannot use {origin}: {exc}{fix}", kind=exc.kind, name=exc.name, reason=exc.reason,
                        remedy=f"install it on this host: {known.hint}" if fix and known else exc.remedy) from exc
    backend, scheme, _ = split_address(launcher)
    if (backend is not None and backend != spec.name) or scheme not in spec.schemes:
        served = ", ".join(f"{s}://" for s in spec.schemes)
        remedy = "start the client with the transport you want (TETRARCH_TRANSPORT=<name>) and let it pass it down"
        raise BackendUnavailable(
            f"{what} was told to use {origin}, which serves {served}, but the process it reports to listens at "
            f"{launcher!r}: one allocation cannot mix transports. {remedy[0].upper()}{remedy[1:]}",
            kind=BackendKind.TRANSPORT, name=spec.name, remedy=remedy,
            reason=f"the process it reports to listens at {launcher!r}, which {spec.name!r} does not serve",
        )
    return Root(role, secret, spec.name, name, on_proc_exit)


def adopt_client_sys_path(env: Mapping[str, str] | None = None) -> None:
    """Append the spawning client's ``sys.path`` entries we lack (same-host procs); from
    ``env`` (a proc's environment, default this process's)."""
    for entry in (os.environ if env is None else env).get(ENV_SYS_PATH.name, "").split(os.pathsep):
        if entry and entry not in sys.path and os.path.isdir(entry):
            sys.path.append(entry)


def install_root(root: Root) -> None:
    """Make ``root`` this process's runtime (procs and host agents call this at start)."""
    global _root
    with _lock:
        _root = root
        install_router(root.router)


def root_if_any() -> Root | None:
    return _root


def get_root() -> Root:
    """This process's runtime, starting the client runtime on first use."""
    global _root
    root = _root
    if root is not None:
        return root
    with _lock:
        if _root is not None:
            return _root
        _root = Root("client", secrets.token_bytes(32), None, name="client")  # select() reads the setting
        install_router(_root.router)
        atexit.register(_shutdown_at_exit)
        install_exit_path()
    client_started(_root)  # what starts with the client (the admin server when asked for): outside the lock
    return _root


_exit_hooks: list[Callable[[], None]] = []


def on_client_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` when the client process exits (the mesh layer stops what it started)."""
    if hook not in _exit_hooks:
        _exit_hooks.append(hook)


def _shutdown_at_exit() -> None:
    if _root is not None:
        _root.supervisor.quiet = True  # stopping everything is not a failure
    for hook in list(_exit_hooks):
        hook()
    if _root is not None:
        _root.output.drain(timeout=5.0)  # procs' last lines reach the terminal before we exit
        if _root.telemetry is not None:
            _root.telemetry.close()  # the client's own rows to disk, after the stops' events
