"""Jobs: named host meshes from an allocator, in the shape of Monarch's ``monarch.job``.

A job is a declarative spec (which named meshes, how many hosts each) plus the
allocation it made. ``apply()`` allocates, ``state()`` returns the host meshes by
name, ``kill()`` tears everything down. Public names live in :mod:`tetrarch.job`.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType

from .._errors import ArgumentError, ArgumentTypeError, MeshNotFoundError
from ._future import Future
from ._hostalloc import job_allocator
from ._procmesh import HostMesh, this_host
from ._shape import Extent, Shape
from ._shutdown import release_this_host

__all__ = ["AllocatorJob", "JobState", "JobTrait", "LocalJob", "ProcessJob"]

#: The dimension of every host mesh a job makes (Monarch's ``{"hosts": N}``).
HOSTS_DIM = "hosts"


class JobState(Mapping[str, HostMesh]):
    """The host meshes of a running job, by name: ``state.trainers`` or ``state["trainers"]``.

    Iterating gives the names in the order the job declared them.
    """

    def __init__(self, meshes: Mapping[str, HostMesh]) -> None:
        self._meshes = dict(meshes)

    def _missing(self, name: object) -> MeshNotFoundError:
        names = ", ".join(self._meshes) or "none"
        return MeshNotFoundError(f"this job has no host mesh named {name!r}; its meshes: {names}")

    def __getitem__(self, name: str) -> HostMesh:
        """The host mesh ``name``.

        Raises:
            MeshNotFoundError: (a ``KeyError``) the job has no mesh of that name; the message lists them.
        """
        try:
            return self._meshes[name]
        except KeyError:
            raise self._missing(name) from None

    def __getattr__(self, name: str) -> HostMesh:
        """The host mesh ``name``, as an attribute.

        Raises:
            MeshNotFoundError: (an ``AttributeError``) the job has no mesh of that name; the message lists them.
        """
        if name.startswith("_"):
            raise AttributeError(name)
        meshes = self.__dict__.get("_meshes", {})
        if name in meshes:
            return meshes[name]
        raise self._missing(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._meshes)

    def __len__(self) -> int:
        return len(self._meshes)

    def __dir__(self) -> Iterable[str]:
        return [*super().__dir__(), *self._meshes]

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={mesh!r}" for name, mesh in self._meshes.items())
        return f"JobState({inner})"


class JobTrait(abc.ABC):
    """A job: a spec of named host meshes and, once applied, the allocation that serves it.

    ``apply()`` allocates if the job is not running (idempotent), ``state()`` applies
    if needed and returns the :class:`JobState`, ``kill()`` tears down the allocation
    (idempotent; stops every proc mesh spawned on its hosts, then the host agents).
    ``with job:`` kills it on exit. After ``kill()``, ``state()`` applies again (a new
    allocation). The calls are thread safe.

    A subclass implements three hooks, each called with the job's lock held:

    * ``_create()``: make the allocation (the hosts need not be up yet). Called by
      ``apply()`` when the job is not running; if it raises, the job stays not
      running, so it must leave nothing behind.
    * ``_state() -> JobState``: the named host meshes of the running allocation.
    * ``_kill()``: tear the allocation down. Called once per successful ``_create()``.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._running = False

    @property
    def running(self) -> bool:
        """Whether the job has an allocation (``apply()`` succeeded and no ``kill()`` since)."""
        return self._running

    def apply(self) -> None:
        """Allocate the job's hosts unless it is running already.

        Raises:
            Exception: whatever ``_create()`` raises (e.g. ``BackendNotFound``,
                ``ProcessStartError``); the job then stays not running.
        """
        with self._lock:
            if not self._running:
                self._create()
                self._running = True

    def state(self) -> JobState:
        """The named host meshes, applying the job first if it is not running.

        Raises:
            Exception: as :meth:`apply`.
        """
        with self._lock:
            self.apply()
            return self._state()

    def kill(self) -> None:
        """Stop the proc meshes spawned on the job's hosts and end the hosts; a no-op if not running."""
        with self._lock:
            if self._running:
                self._running = False
                self._kill()

    def __enter__(self) -> JobTrait:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.kill()

    @abc.abstractmethod
    def _create(self) -> None:
        """Make the allocation (see the class docstring)."""

    @abc.abstractmethod
    def _state(self) -> JobState:
        """The host meshes of the running allocation."""

    @abc.abstractmethod
    def _kill(self) -> None:
        """Tear the allocation down."""


def _checked_meshes(meshes: object) -> dict[str, int]:
    """``meshes`` as a dict of mesh name -> host count, validated.

    Raises:
        ArgumentTypeError: not a mapping of strings to integers.
        ArgumentError: empty, a name that is no identifier (or starts with ``_``), or a count below 1.
    """
    if not isinstance(meshes, Mapping):
        raise ArgumentTypeError(f"a job needs a mapping of mesh name to host count, e.g. {{'trainers': 2}}, "
                                f"got {meshes!r}")
    if not meshes:
        raise ArgumentError("a job needs at least one named mesh, e.g. {'trainers': 2}")
    checked: dict[str, int] = {}
    for name, hosts in meshes.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise ArgumentError(f"mesh name {name!r} must be an identifier not starting with '_' "
                                f"(it becomes an attribute of the job's state)")
        if isinstance(hosts, bool) or not isinstance(hosts, int):
            raise ArgumentTypeError(f"mesh {name!r}: the host count must be an int, got {hosts!r}")
        if hosts < 1:
            raise ArgumentError(f"mesh {name!r}: the host count must be at least 1, got {hosts}")
        checked[name] = hosts
    return checked


class AllocatorJob(JobTrait):
    """Named host meshes whose host agents come from an allocator backend.

    ``AllocatorJob({"trainers": 2, "workers": 1})`` makes two host meshes, ``trainers``
    with dimension ``hosts`` of size 2 and ``workers`` of size 1; each is one
    allocation (``AllocRequest`` named after the mesh, with ``options``).

    The allocator is chosen as every backend is (docs/plugins.md §4): ``allocator``,
    else ``configure(allocator=...)`` / ``TETRARCH_ALLOCATOR``, else the
    ``tetrarch_select_backend`` hooks (their request holds ``{"meshes": {name: hosts}}``),
    else the highest priority. It is chosen when the job is applied.

    Raises:
        ArgumentTypeError, ArgumentError: ``meshes`` is not a non-empty mapping of
            identifiers to positive ints, or ``options`` is not a mapping.
    """

    def __init__(self, meshes: Mapping[str, int], *, allocator: str | None = None,
                 options: Mapping[str, object] | None = None) -> None:
        super().__init__()
        self._spec = _checked_meshes(meshes)
        if allocator is not None and (not isinstance(allocator, str) or not allocator):
            raise ArgumentTypeError(f"allocator must be a backend name such as 'local', got {allocator!r}")
        if options is not None and not isinstance(options, Mapping):
            raise ArgumentTypeError(f"options must be a mapping, got {options!r}")
        self._allocator = allocator
        self._options = dict(options or {})
        self._meshes: dict[str, HostMesh] = {}

    @property
    def meshes(self) -> dict[str, int]:
        """The spec: mesh name -> number of hosts."""
        return dict(self._spec)

    def _create(self) -> None:
        """Choose the allocator and start every mesh's host agents.

        Raises:
            BackendNotFound, BackendUnavailable: the allocator cannot be chosen (see
                ``tetrarch.plugins.get_allocator``).
            AllocatorError, ProcessStartError: host agents could not be started; the
                meshes already started are shut down.
        """
        name = job_allocator(self._allocator, {"meshes": dict(self._spec)})
        started: dict[str, HostMesh] = {}
        try:
            for mesh_name, hosts in self._spec.items():
                mesh = HostMesh(Shape(Extent([HOSTS_DIM], [hosts])), None, allocator=name, owned=True,
                                name=mesh_name, options=self._options)
                started[mesh_name] = mesh
                mesh._ensure_started()
        except BaseException:
            _shutdown(started.values())
            raise
        self._meshes = started

    def _state(self) -> JobState:
        return JobState(self._meshes)

    def _kill(self) -> None:
        meshes, self._meshes = self._meshes, {}
        _shutdown(meshes.values())

    def __repr__(self) -> str:
        chosen = f", allocator={self._allocator!r}" if self._allocator else ""
        return f"{type(self).__name__}({self._spec!r}{chosen})"


class ProcessJob(AllocatorJob):
    """Named host meshes whose hosts are processes on this machine (the ``local`` allocator).

    Monarch's multi-host test vehicle: ``ProcessJob({"trainers": 2, "dataloaders": 1})``.

    Raises:
        ArgumentTypeError, ArgumentError: as :class:`AllocatorJob`.
    """

    def __init__(self, meshes: Mapping[str, int]) -> None:
        super().__init__(meshes, allocator="local")

    def __repr__(self) -> str:
        return f"ProcessJob({self._spec!r})"


class LocalJob(JobTrait):
    """Every named mesh is :func:`tetrarch.this_host` (Monarch's ``LocalJob``).

    ``kill()`` shuts down this machine's ``this_host()`` agent and every proc mesh on
    it (also those spawned through ``this_host()`` directly); the next use of
    ``this_host()`` starts a fresh agent.

    Raises:
        ArgumentError: ``hosts`` is empty or holds a name that is no identifier.
    """

    def __init__(self, hosts: Iterable[str] = (HOSTS_DIM,)) -> None:
        super().__init__()
        if isinstance(hosts, str):
            hosts = (hosts,)
        self._names = tuple(_checked_meshes(dict.fromkeys(hosts, 1)))

    def _create(self) -> None:
        this_host()  # checks the allocator choice now (see this_host)

    def _state(self) -> JobState:
        mesh = this_host()
        return JobState(dict.fromkeys(self._names, mesh))

    def _kill(self) -> None:
        release_this_host()

    def __repr__(self) -> str:
        return f"LocalJob(hosts={self._names!r})"


def _shutdown(meshes: Iterable[HostMesh]) -> None:
    futures: list[Future[None]] = [mesh.shutdown() for mesh in meshes]
    for fut in futures:
        fut.get()
