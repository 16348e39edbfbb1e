"""``HostMesh`` and ``ProcMesh``: hosts (host agents) and the OS processes on them."""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import pickle
import secrets
import sys
import threading
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..._config import (
    ENV_ALLOC_ID,
    ENV_CLIENT_ADDR,
    ENV_PROC_COORDS,
    ENV_PROC_MESH,
    ENV_RANK_DIM,
    ENV_SIZE_DIM,
    ENV_SPANS_HOSTS,
    HOST_START_TIMEOUT,
    PRELOAD,
    PROC_START_TIMEOUT,
    STOP_TIMEOUT,
    config_env,
)
from ..._errors import (
    ArgumentError,
    ArgumentTypeError,
    MeshStoppedError,
    NotOwnerError,
    NotSupportedError,
    SupervisionError,
)
from ..._log import get_logger
from ..._plugins import get_registry
from ..._telemetry import _caller
from ..actors._actor import Actor
from ..actors._runner import current_actor
from ..plumbing._alloc import HOST_AGENT_MODULE, AgentCommand, Allocation, Allocator, AllocRequest
from ..plumbing._boot_cmd import BootstrapSpec, proc_command
from ..plumbing._spawn import ExitInfo
from ..process._root import Root, child_env, get_root, on_client_exit
from ..router._router import PeerUnreachable
from ..services._collect import ReplyCollector, group_by_address
from ..services._launch import ProcRecord
from ..services._output import set_output_options
from ..services._supervision import MeshState
from ..values import _serial, _wire
from ..values._context import _current
from ..values._future import CoroutineFuture, Future
from ..values._shape import Extent, MeshTrait, Shape
from ._host_alloc import this_host_allocator
from ._mesh import ActorMesh
from ._shutdown import (
    _kill_records,
    _live_host_meshes,
    _live_proc_meshes,
    _this,
    kill_procs_at,
    shutdown_at_exit,
    stop_procs,
)

__all__ = ["HostMesh", "ProcMesh", "this_host", "this_proc"]

A = TypeVar("A", bound=Actor)
_ids = itertools.count()
_log = get_logger("supervision")


@dataclass(frozen=True, slots=True)
class _Host:
    address: str
    hostname: str
    pid: int


def _preload_modules(preload: Sequence[str]) -> tuple[str, ...]:
    """The ``preload`` setting's modules, then ``preload``'s, once each.

    Raises:
        TypeError: ``preload`` is no list of module names.
    """
    if isinstance(preload, str) or not all(isinstance(m, str) and m and all(
            part.isidentifier() for part in m.split(".")) for m in preload):
        raise ArgumentTypeError(f"spawn_procs(preload=...) takes a list of module names, got {preload!r}; "
                                "e.g. preload=[\"torch\", \"numpy\"]")
    return tuple(dict.fromkeys([*PRELOAD(), *preload]))


def _uid(name: str) -> str:
    return f"{name}-{os.getpid()}-{next(_ids)}-{secrets.token_hex(2)}"


class HostMesh(MeshTrait):
    """Hosts, each served by a host agent that starts and watches procs.

    Get one from :func:`this_host` (this machine) or from a job
    (``tetrarch.job.AllocatorJob({"trainers": 2}).state().trainers``, any allocator).
    """

    def __init__(self, shape: Shape, hosts: list[_Host] | None, *, allocator: str = "local",
                 owned: bool = True, implicit: bool = False, name: str = "hosts",
                 options: Mapping[str, object] | None = None, env: Mapping[str, str] | None = None) -> None:
        self._shape = shape
        self._env = dict(env or {})  # added to the host agents' environment (ProcessJob(env=...))
        self._hosts = hosts  # None: not started yet (this_host() starts on first use)
        self._implicit = implicit  # the client's this_host(): restarted if its agent died
        self._allocator = allocator  # a backend name, resolved through the plugin registry
        self._name = name  # AllocRequest.name
        self._options: Mapping[str, object] = dict(options or {})  # AllocRequest.options
        self._origin = self  # the mesh whose host agents these are (a slice's owner)
        self._allocation: Allocation | None = None
        self._owned = owned
        self._lock = threading.Lock()
        self._shut = False
        self._host_records: list[ProcRecord] = []
        if owned:
            _live_host_meshes.add(self)

    def _new_with_shape(self, shape: Shape) -> HostMesh:
        self._ensure_started()
        mesh = HostMesh(shape, self._hosts, allocator=self._allocator, owned=False, name=self._name)
        mesh._origin = self._origin  # ranks index the origin's hosts; its shutdown covers the slice
        return mesh

    def _ensure_started(self) -> list[_Host]:
        if self._origin is not self:
            return self._origin._ensure_started()
        with self._lock:
            if self._shut:
                raise MeshStoppedError("HostMesh has already been shut down; allocate a new one")
            if self._hosts is not None and self._owned:
                dead = [r for r in self._host_records if r.returncode is not None
                        or r.address in get_root().router.dead_peers]
                if dead and self._implicit:
                    self._restart()
                elif dead:
                    rec = dead[0]
                    why = get_root().router.dead_peers.get(rec.address) or rec.describe_exit()
                    raise SupervisionError(f"the {rec.what} of this HostMesh died ({why}); allocate a new HostMesh")
            if self._hosts is None:
                allocator = get_registry().get_allocator(self._allocator)
                self._hosts = _start_hosts(get_root(), allocator, len(self._shape) or 1, self)
            return self._hosts

    @property
    def initialized(self) -> Future[bool]:
        """Completes with True once every host agent is up (starting them now if they are not yet).

        ``.get()`` or ``await`` it; it raises what starting or attaching raised
        (``ProcessStartError``, ``SupervisionError``, ``MeshStoppedError``, ...).
        """
        fut: Future[bool] = Future._new()

        def start() -> None:
            try:
                self._ensure_started()
            except BaseException as exc:  # noqa: BLE001 - the future carries it
                fut._set_exception(exc)
            else:
                fut._set_result(True)

        threading.Thread(target=start, name="tetrarch-host-start", daemon=True).start()
        return fut

    def _restart(self) -> None:
        """Replace this_host()'s dead host agent with a fresh one (lock held)."""
        allocation, self._allocation = self._allocation, None
        if allocation is not None:
            allocation.stop(grace=1.0)
        root = get_root()
        for rec in self._host_records:
            root.launches.forget(rec.ident)
        self._host_records = []
        self._hosts = None

    def spawn_procs(self, per_host: dict[str, int] | None = None, *, name: str | None = None,
                    bootstrap: Any = None, bootstrap_command: BootstrapSpec = None,
                    preload: Sequence[str] = ()) -> ProcMesh:
        """Start ``per_host`` procs on every host, e.g. ``per_host={"gpus": 4}``.

        Blocks until every proc is ready. A ``gpus`` dimension sets each proc's
        ``CUDA_VISIBLE_DEVICES``; every proc gets rank variables (``RANK``,
        ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``TETRARCH_RANK_<DIM>``).
        ``bootstrap_command`` (a :class:`~tetrarch.BootstrapCommand`, or a function of the
        proc's ``Point`` returning one) is how the host agents start the procs.
        ``preload`` names modules (``["torch"]``) each proc has imported before its first
        actor, added to the ``preload`` setting: procs forked from their host's template
        process (the default, ``TETRARCH_FORK_PROCS``) get them from it, imported once per host.

        Raises:
            TypeError: ``per_host`` is not a dict of dimension names to sizes (e.g. a bare
                ``per_host=4``: the message names ``per_host={"gpus": 4}``), or
                ``bootstrap_command`` is no ``BootstrapCommand``, or ``preload`` is no list of module names.
            ValueError: bad ``per_host`` (non-positive sizes, labels that clash with hosts').
            ProcessStartError: a proc exited before it was ready (exit code, stderr tail).
        """
        if bootstrap is not None:
            raise NotSupportedError("spawn_procs(bootstrap=...) is not supported yet; run setup in an actor")
        if per_host is not None and not isinstance(per_host, Mapping):
            example = per_host if isinstance(per_host, int) and not isinstance(per_host, bool) else 4
            raise ArgumentTypeError(f"spawn_procs(per_host=...) takes a dict of dimension names to sizes, got "
                                    f"{type(per_host).__name__} {per_host!r}; e.g. per_host={{\"gpus\": {example}}}")
        per_host = dict(per_host or {})
        clash = set(per_host) & set(self._shape.labels)
        if clash:
            raise ArgumentError(f"per_host labels {sorted(clash)} clash with the host mesh's own dimensions")
        local = Extent(list(per_host), list(per_host.values()))  # validates labels and sizes
        hosts = self._ensure_started()
        root = get_root()
        mesh_name = name or "procs"
        uid = _uid(mesh_name)
        extent = Extent(list(self._shape.labels) + list(local.labels), list(self._shape.sizes) + list(local.sizes))
        host_ranks = self._shape.ranks()
        per = local.nelements
        world = len(host_ranks) * per
        modules = _preload_modules(preload)  # the setting's modules and these
        # The host agent's own values must not leak into these procs: every setting, given or at its default.
        config = config_env(complete=True, overrides={PRELOAD.key: modules} if modules else None)
        records: list[ProcRecord] = []
        requests: list[tuple[_Host, list[_wire.ProcSpec]]] = []
        for h, host_rank in enumerate(host_ranks):
            specs = []
            for lp in local.points():
                rank = h * per + lp.rank
                point = extent.point(rank)
                ident = f"{uid}[{rank}]"
                env = {
                    **config,
                    "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(lp.rank),
                    "LOCAL_WORLD_SIZE": str(per), "GROUP_RANK": str(h), ENV_PROC_MESH.name: mesh_name,
                }
                for label, size in zip(extent.labels, extent.sizes, strict=True):
                    env[ENV_RANK_DIM.for_dim(label)] = str(point[label])
                    env[ENV_SIZE_DIM.for_dim(label)] = str(size)
                env[ENV_PROC_COORDS.name] = " ".join(f"{label}={point[label]}" for label in extent.labels)
                gpu = lp["gpus"] if "gpus" in local.labels else None
                specs.append(_wire.ProcSpec(ident, env, gpu, proc_command(bootstrap_command, point)))
                records.append(ProcRecord(ident, f"proc {mesh_name}{point}", meta={"agent": hosts[host_rank].address}))
            requests.append((hosts[host_rank], specs))
        waiter = root.launches.expect(records)
        for host, specs in requests:
            frames = [_wire.sys_header(_wire.SVC_HOST, "spawn_procs"),
                      *_serial.dumps(_wire.SpawnProcs(root.router.address, specs))]
            try:
                root.router.send(host.address, frames)
            except PeerUnreachable as exc:
                raise SupervisionError(f"host agent at {host.address} is unreachable: {exc}") from exc
        try:
            waiter.wait(PROC_START_TIMEOUT())
        except BaseException:
            _kill_records(root, records, requests)
            raise
        pm = ProcMesh(self, Shape(extent), records, owned=True, name=mesh_name)
        owner = current_actor()
        if owner is not None:
            owner.children.append(pm)
        return pm

    def shutdown(self) -> Future[None]:
        """Stop every proc started here and end the host agents (owned meshes only).

        Raises:
            RuntimeError: this mesh is a slice or a reference.
        """
        if not self._owned:
            raise NotOwnerError("cannot shut down a HostMesh that is a reference or slice instead of owned")
        with self._lock:
            if self._shut:
                return Future._completed(None)
            self._shut = True
            allocation, self._allocation = self._allocation, None
        for pm in list(_live_proc_meshes):
            if pm._host_mesh is not None and pm._host_mesh._origin is self:
                try:
                    pm.stop().get(STOP_TIMEOUT() + 5)
                except Exception:  # noqa: BLE001
                    pass
        if allocation is not None:
            root = get_root()
            dead = root.router.dead_peers
            agents = [r for r in self._host_records if r.returncode is None and r.address not in dead]
            waiter = root.launches.expect_exits(agents)
            for rec in agents:
                try:
                    root.router.send(rec.address, [_wire.sys_header(_wire.SVC_HOST, "shutdown")])
                except PeerUnreachable:
                    pass
            if not waiter.wait(STOP_TIMEOUT()):
                allocation.stop(grace=2.0)
            else:
                allocation.stop(grace=2.0)  # reaps the exited agents
            for rec in self._host_records:
                root.launches.forget(rec.ident)
        _live_host_meshes.discard(self)
        return Future._completed(None)

    def __repr__(self) -> str:
        return f"<HostMesh {self.extent!r}>"

    def __reduce__(self) -> tuple:
        hosts = self._ensure_started()
        return (_rebuild_host_mesh, (self._shape, hosts, self._allocator))


def _rebuild_host_mesh(shape: Shape, hosts: list[_Host], allocator: str) -> HostMesh:
    return HostMesh(shape, hosts, allocator=allocator, owned=False)


def _start_hosts(root: Root, allocator: Allocator, n: int, mesh: HostMesh) -> list[_Host]:
    """Bring up ``n`` host agents through ``allocator`` and wait until each connected back.

    When the allocation spans hosts the client first listens on a routable address too
    (``Allocator.spans_hosts``), and the agents and their procs listen routably.

    Raises:
        ProcessStartError: an agent exited first, or not all connected within
            ``TETRARCH_HOST_START_TIMEOUT``.
        TransportError: the transport cannot span hosts (e.g. ``ipc``).
    """
    extra = {}
    if allocator.spans_hosts:
        root.router.listen_routable(allocator.client_host(mesh._options))
        extra[ENV_SPANS_HOSTS.name] = "1"
    alloc_id = _uid("hosts")
    records = [ProcRecord(f"{alloc_id}/{i}", f"host agent {i}", kind="host agent") for i in range(n)]
    waiter = root.launches.expect(records)
    env = child_env(root, {**mesh._env, ENV_CLIENT_ADDR.name: root.router.address, ENV_ALLOC_ID.name: alloc_id,
                           **extra})
    command = AgentCommand((sys.executable, "-m", HOST_AGENT_MODULE), env, secret=root.secret)

    def on_exit(index: int, info: ExitInfo) -> None:
        root.launches.exited(f"{alloc_id}/{index}", info.returncode, info.stderr_tail)

    mesh._allocation = allocator.allocate(AllocRequest(n, command, mesh._name, mesh._options), on_exit)
    try:
        waiter.wait(HOST_START_TIMEOUT())
    except BaseException:
        mesh._allocation.stop(grace=1.0)
        raise
    mesh._host_records = records
    return [_Host(r.address, r.hostname, r.pid) for r in records]




class ProcMesh(MeshTrait):
    """OS processes (procs) on a host mesh; spawn actors on them."""

    def __init__(self, host_mesh: HostMesh | None, shape: Shape, procs: list[ProcRecord], *, owned: bool,
                 name: str, state: MeshState | None = None) -> None:
        self._host_mesh = host_mesh
        self._shape = shape
        self._procs = procs
        self._owned = owned
        self._name = name
        self._state = state or MeshState()
        self._stop_future: Future[None] | None = None
        if owned:
            _live_proc_meshes.add(self)

    def _new_with_shape(self, shape: Shape) -> ProcMesh:
        return ProcMesh(self._host_mesh, shape, self._procs, owned=False, name=self._name, state=self._state)

    @property
    def host_mesh(self) -> HostMesh | None:
        return self._host_mesh

    @property
    def _labels(self) -> list[str]:
        """The dimension names of this mesh or slice, e.g. ``["gpus"]``: Monarch's
        ``ProcMesh._labels``, which its DDP example reads (``dict.fromkeys(procs._labels, 0)``)."""
        return list(self._shape.labels)

    @property
    def initialized(self) -> Future[bool]:
        """Already complete: ``spawn_procs`` returns once every proc is ready."""
        return Future._completed(True)

    def spawn(self, name: str, cls: type[A], *args: Any, **kwargs: Any) -> A:
        """Spawn one ``cls(*args, **kwargs)`` per proc; returns the ActorMesh at once.

        ``__init__`` runs remotely before any message to the actor; ``mesh.initialized``
        waits for it.

        Raises:
            TypeError: ``cls`` is not an Actor subclass, the arguments do not fit its
                ``__init__``, or an argument cannot be pickled.
            RuntimeError: this proc mesh was stopped.
        """
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise ArgumentTypeError(f"spawn() needs a subclass of tetrarch.Actor, got {cls!r} "
                            f"({type(cls).__name__}); define it as 'class {getattr(cls, '__name__', 'X')}(Actor)'")
        if not isinstance(name, str) or not name:
            raise ArgumentTypeError(f"spawn() needs a non-empty name string first, got {name!r}")
        if self._state.stopped:
            raise MeshStoppedError(f"ProcMesh {self._name!r} has already been stopped; spawn a new one")
        try:
            if cls.__init__ is object.__init__ and cls.__new__ is object.__new__:
                # object's own: no arguments. (inspect.signature would parse its text signature,
                # which costs a cold client ~5 ms of tokenizer set-up on the first spawn.)
                if args or kwargs:
                    raise TypeError("too many arguments: it takes none")
            else:
                inspect.signature(cls).bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentTypeError(f"arguments do not match {cls.__qualname__}.__init__: {exc}") from None
        except ValueError:
            pass  # no introspectable signature
        body = _serial.dumps_checked((cls, args, kwargs), f"spawn of {cls.__qualname__}",
                                     _serial.arg_parts(args, kwargs))
        root = get_root()
        rt = root.router
        procs = [self._procs[r] for r in self._shape.ranks()]
        dead = [(p, rt.dead_peers[p.address]) for p in procs if p.address in rt.dead_peers]
        if dead:
            p, why = dead[0]
            raise SupervisionError(f"cannot spawn {name!r}: ProcMesh {self._name!r} has {len(dead)} dead proc(s), "
                               f"e.g. {p.what}: {why}; spawn on a slice without them or on a new proc mesh")
        key = _uid(name)
        ids = [(p.address, key) for p in procs]
        extent = self._shape.extent
        labels, sizes = self._shape.labels, self._shape.sizes
        owner = current_actor()
        # Failures of meshes the client owns are held while a call (or this spawn) to the
        # failed actor is in flight, so that one the user receives counts as handled.
        claims = root.supervisor if owner is None and root.role == "client" else None
        coll = ReplyCollector(rt, len(ids), self._shape, f"{name}.__init__", False, False, claims,
                         [(k, addr) for addr, k in ids], (_wire.ERR, _wire.DEAD))
        coll.watch_targets(group_by_address(ids))
        coll.obs = _caller.observe_spawn(name, cls.__qualname__, len(ids)) if _caller.ON else None  # the spawn span
        relays = [p.meta.get("agent") for p in procs]  # their host agents relay mesh calls (services/_relay)
        mesh: ActorMesh[A] = ActorMesh(name, cls, Shape(extent), ids, initialized=Future._new(), proc_mesh=self,
                                       relays=relays if any(relays) else None,
                                       claims=claims)
        coll.observed = [mesh.initialized]  # the user waits on initialized, not on the raw replies
        root.supervisor.adopt(key, name, mesh, mesh._state, owner, self._state, [
            (p.address, i, f"{name}{extent.point(i)}" if labels else name, p.hostname, p.pid)
            for i, p in enumerate(procs)])
        if owner is not None:
            owner.children.append(mesh)
        mesh_ref = pickle.dumps(self, 5)
        for i, (addr, _) in enumerate(ids):
            meta = pickle.dumps(_wire.SpawnMeta(key, name, i, labels, sizes, mesh_ref, rt.address), 5)
            try:
                rt.send(addr, [_wire.sys_header(_wire.SVC_PROC, "spawn", rt.address, coll.port), meta, *body])
            except PeerUnreachable as exc:
                coll.fail(i, str(exc))
        initialized = mesh.initialized

        def on_init(f: Future[Any]) -> None:
            try:
                f.get()
            except BaseException as exc:  # noqa: BLE001
                initialized._set_exception(exc)
            else:
                initialized._set_result(None)

        coll.futures[0].add_done_callback(on_init)
        return mesh  # type: ignore[return-value]

    def logging_option(self, stream_to_client: bool = True, aggregate_window_sec: float | None = None,
                       level: int = logging.INFO) -> CoroutineFuture[None]:
        """Where the procs' stdout and stderr go, and which Python log records they emit.

        ``stream_to_client``: each line at this (the owning) process's stdout or stderr,
        as the proc wrote it, after ``[<mesh> <dim>=<i> ...] ``; False: unprefixed, through
        the host agent's own stdout and stderr. ``aggregate_window_sec``: identical lines
        written within that many seconds (by any procs of the mesh) print once, as
        ``[<mesh> N similar log lines] <line>``; None or 0: every line. ``level``: the
        procs' root logger level (a handler to stderr is added where there is none).
        Defaults for new meshes: ``TETRARCH_FORWARD_OUTPUT``, ``TETRARCH_AGGREGATE_WINDOW``.
        Applies to this mesh or slice; lines already received are printed first. Like
        Monarch's, it is asynchronous: ``.get()`` or ``await`` the future, which
        completes once every live proc and host agent applied the change; it is also a
        coroutine, so ``asyncio.run(procs.logging_option(...))`` works as with Monarch's
        ``async def`` (the change starts at the call either way).

        Raises:
            TypeError: an argument of the wrong type.
            ValueError: a negative window.
        """
        if not isinstance(stream_to_client, bool) or not isinstance(level, int) or isinstance(level, bool):
            raise ArgumentTypeError(f"logging_option(stream_to_client: bool, level: int), got "
                                    f"{stream_to_client!r}, {level!r}; e.g. level=logging.INFO")
        if aggregate_window_sec is not None and (not isinstance(aggregate_window_sec, (int, float))
                                                 or aggregate_window_sec < 0):
            raise ArgumentError(f"aggregate_window_sec must be None or seconds >= 0, got {aggregate_window_sec!r}")
        root = get_root()
        procs = [self._procs[r] for r in self._shape.ranks()]
        hosts = [h.address for h in (self._host_mesh._hosts or [])] if self._host_mesh is not None else []
        return set_output_options(root.router, root.output, [(p.ident, p.address) for p in procs if p.address],
                                  hosts, stream_to_client, aggregate_window_sec, level)

    def stop(self) -> Future[None]:
        """Stop every actor (pending messages first), then let the procs exit.

        Each proc exits through the interpreter's normal finalisation (atexit handlers
        run). The whole stop is bounded by ``TETRARCH_STOP_TIMEOUT`` seconds: a proc's
        actors get three quarters of it, its exit the rest. A proc that cannot keep to it
        (an actor blocked in ``__init__`` or an endpoint is left behind; an atexit handler
        or a non-daemon thread that does not end) says so on stderr, which is printed
        here, and ends itself; one that did not end a second later is killed (logged
        here, with the reason). Stopping twice returns the first stop's future. Once it
        completes, every line the procs wrote has been printed (see :meth:`logging_option`).

        Raises:
            ValueError: this is a slice or a reference (only the owner may stop).
        """
        if not self._owned:
            raise NotOwnerError(f"ProcMesh {self._name!r} is not owned (a slice or reference); it must be stopped by "
                             f"its owner")
        with self._state.lock:
            if self._stop_future is not None:
                return self._stop_future
            self._state.stopped = True
            fut: Future[None] = Future._new()
            self._stop_future = fut
        threading.Thread(target=self._stop_blocking, args=(fut,), name="tetrarch-stop", daemon=True).start()
        return fut

    def _kill_at(self, addresses: set[str], why: str) -> None:
        """Have the host agents SIGKILL this mesh's live procs at ``addresses`` (``why``: for their death reason)."""
        kill_procs_at(get_root(), self._procs, self._agents(), addresses, why)

    def _agents(self) -> list[Any]:
        return list(self._host_mesh._hosts or []) if self._host_mesh is not None else []

    def _stop_blocking(self, fut: Future[None]) -> None:
        root = get_root()
        stop_procs(root, f"ProcMesh {self._name!r}", self._procs, self._agents())
        root.output.drain(timeout=STOP_TIMEOUT())  # their lines came before their exit reports
        for p in self._procs:
            root.launches.forget(p.ident)
        root.supervisor.release_proc_mesh(self._state)
        _live_proc_meshes.discard(self)
        fut._set_result(None)

    def __await__(self) -> Generator[Any, None, ProcMesh]:
        """``await proc_mesh(...)`` (Monarch's older style): the procs are ready; gives the mesh."""
        yield from self.initialized.__await__()
        return self

    def __repr__(self) -> str:
        return f"<ProcMesh {self._name} {self.extent!r}>"

    def __reduce__(self) -> tuple:
        procs = [(p.ident, p.what, p.address, p.pid, p.hostname) for p in self._procs]
        return (_rebuild_proc_mesh, (self._host_mesh, self._shape, procs, self._name))


def _rebuild_proc_mesh(host_mesh: HostMesh | None, shape: Shape, procs: list[tuple], name: str) -> ProcMesh:
    records = [ProcRecord(ident, what, address=address, pid=pid, hostname=host, ready=True)
               for ident, what, address, pid, host in procs]
    return ProcMesh(host_mesh, shape, records, owned=False, name=name)


def this_host() -> HostMesh:
    """The host this code runs on (a mesh without dimensions); spawn procs on it.

    In a proc it is the host agent that started the proc. In the client it is a host
    agent on this machine, started on first use by an allocator having the
    ``same-host`` capability: the one ``TETRARCH_ALLOCATOR`` (or
    ``configure(allocator=...)``) names, else the one the ``tetrarch_select_backend``
    hooks and priority choose (``local`` unless a plugin adds another). The choice is
    checked here, when ``this_host()`` is first called, not later when procs are spawned.
    For hosts elsewhere use a job: ``tetrarch.job.AllocatorJob``.

    Raises:
        BackendNotFound: ``TETRARCH_ALLOCATOR`` names no installed allocator (the
            message lists the installed ones and the ``pip install`` hint).
        BackendUnavailable: it names an allocator that cannot start hosts on this
            machine (e.g. ``slurm``: the message says to use ``AllocatorJob`` or unset
            the variable) or cannot run here, or no same-host allocator is available.
    """
    root = get_root()
    mesh = _this.host
    if mesh is None:
        if root.role == "proc" and root.host_agent_address:
            mesh = HostMesh(Shape(Extent([], [])), [_Host(root.host_agent_address, "", 0)], owned=False)
        else:
            mesh = HostMesh(Shape(Extent([], [])), None, allocator=this_host_allocator(), owned=True, implicit=True)
        _this.host = mesh
    return mesh


def this_proc() -> ProcMesh:
    """This process as a one-proc mesh: actors spawned on it run in this process.

    Inside an actor it is ``context().actor_instance.proc``: the actor's proc as a
    slice of the proc mesh it was spawned on.
    """
    info = _current.get()
    if info is not None and info.instance.proc_mesh is not None:
        return info.instance.proc
    root = get_root()
    if _this.proc is None:
        rec = ProcRecord("self", "this proc", address=root.router.address, pid=os.getpid(), ready=True)
        _this.proc = ProcMesh(None, Shape(Extent([], [])), [rec], owned=False, name="this_proc")
    return _this.proc


on_client_exit(shutdown_at_exit)
