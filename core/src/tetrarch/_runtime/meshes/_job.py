"""Jobs: named host meshes from an allocator, in the shape of Monarch's ``monarch.job``.

A job is a declarative spec (which named meshes, how many hosts each) plus the
allocation it made. ``apply()`` allocates, ``state()`` returns the host meshes by
name, ``kill()`` tears everything down. Public names live in :mod:`tetrarch.job`.
"""

from __future__ import annotations

import abc
import atexit
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

from ..._errors import ArgumentError, ArgumentTypeError, MeshNotFoundError, NotSupportedError
from ..._log import get_logger
from ..services._telemetry import Telemetry
from ..values._future import Future
from ..values._shape import Extent, Shape
from ._host_alloc import job_allocator
from ._job_cache import BATCH_ENV, DEFAULT_JOB_PATH, dump_job, loads_checked, read_dump
from ._proc_mesh import HostMesh, this_host
from ._shutdown import release_this_host
from ._telemetry import job_telemetry

__all__ = ["DEFAULT_JOB_PATH", "AllocatorJob", "BatchJob", "JobState", "JobTrait", "LocalJob", "ProcessJob",
           "job_load", "job_loads"]

_log = get_logger("job")

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


#: ``state()``'s default ``cached_path``: Monarch's path for jobs whose hosts outlive the client, else no cache.
AUTO: Any = "auto"


class JobTrait(abc.ABC):
    """A job: a spec of named host meshes and, once applied, the allocation that serves it.

    ``apply()`` allocates if the job is not running (idempotent), ``state()`` applies
    if needed and returns the :class:`JobState`, ``kill()`` tears down the allocation
    (idempotent; stops every proc mesh spawned on its hosts, then the host agents).
    ``with job:`` kills it on exit. After ``kill()``, ``state()`` applies again (a new
    allocation). The calls are thread safe. ``dump(path)`` / ``job_load(path)`` keep a
    job on disk; ``state(cached_path=...)`` reuses a dumped job that is still running
    when ``can_run`` says it serves this spec (see docs/jobs.md).

    A subclass implements four hooks, the first three called with the job's lock held:

    * ``_create()``: make the allocation (the hosts need not be up yet). Called by
      ``apply()`` when the job is not running; if it raises, the job stays not
      running, so it must leave nothing behind.
    * ``_state() -> JobState``: the named host meshes of the running allocation.
    * ``_kill()``: tear the allocation down. Called once per successful ``_create()``.
    * ``can_run(spec) -> bool``: whether this (cached, running) job can serve ``spec``.

    ``_outlives_client`` (class attribute) says whether the job's hosts survive the
    client process; only then is reuse across runs possible and ``state()`` caches by default.
    """

    #: Whether the hosts survive the client process (workers of ``run_worker_loop_forever``).
    _outlives_client: bool = False

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._running = False
        self._apply_id: str | None = None
        self._cached: JobTrait | None = None  # the dumped job state() connected to instead

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        state["_cached"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    @property
    def running(self) -> bool:
        """Whether the job has an allocation (applied, or connected to a cached one, and no ``kill()`` since)."""
        return self._running or self._cached is not None

    @property
    def active(self) -> bool:
        """Monarch's name for :attr:`running`."""
        return self.running

    @property
    def apply_id(self) -> str | None:
        """A UUID naming the current allocation (a new one per ``apply()`` that allocates; a cached job keeps its own);
        None while not running."""
        if self._cached is not None:
            return self._cached._apply_id
        return self._apply_id if self._running else None

    @property
    def telemetry(self) -> Telemetry:
        """SQL over the telemetry of this job's hosts and this client: ``job.telemetry.query("SELECT ...")``
        returns a ``pyarrow.Table`` (docs/telemetry.md lists the tables; needs ``tetrarch[sql]``). Asking
        neither applies the job nor starts its hosts."""
        def agents() -> list[str]:  # a job not running (killed) answers from this client's rows only
            meshes = self.state().values() if self.running else ()
            return [h.address for mesh in meshes for h in (mesh._origin._hosts or [])]

        return job_telemetry(agents)

    def apply(self, client_script: str | None = None) -> None:
        """Allocate the job's hosts unless it is running already.

        With ``client_script``, the job also runs that Python script as its client in batch
        mode (Monarch's ``BatchJob``): the script's ``job.state()`` connects to this job
        (``MONARCH_BATCH_JOB=1`` is set for it). Only jobs that support it accept it (``LocalJob``).

        Raises:
            NotSupportedError: ``client_script`` for a job that cannot run one.
            Exception: whatever ``_create()`` raises (e.g. ``BackendNotFound``,
                ``ProcessStartError``); the job then stays not running.
        """
        with self._lock:
            if client_script is not None:
                self._run_client_script(client_script)
                return
            if not self.running:
                self._create()
                self._running = True
                self._apply_id = str(uuid.uuid4())

    def _run_client_script(self, client_script: str) -> None:
        """Batch mode (``apply(client_script=...)``); jobs that support it override this.

        Raises:
            NotSupportedError: always, here.
        """
        raise NotSupportedError(
            f"{type(self).__name__} cannot run a client script in batch mode (apply(client_script=...)); LocalJob can. "
            f"Run the script yourself (python {client_script}): its job.state() connects to this job")

    def state(self, cached_path: str | os.PathLike[str] | None = AUTO) -> JobState:
        """The named host meshes, applying the job first if it is not running.

        ``cached_path`` (Monarch's semantics): when the job is not running and the file
        holds a dumped job that is still running and ``can_run(self)``, connect to that
        one; otherwise apply this job and dump it there. A cached job that cannot run
        this spec is killed and its file removed. ``None``: no cache. The default is
        Monarch's ``.monarch/job_state.pkl`` for jobs whose hosts outlive the client
        (``WorkerJob``) and in a batch-mode client script; for the others (their hosts
        end with the client, so no later run could reuse them) no cache is read or written.

        Raises:
            Exception: as :meth:`apply`; OSError when the cache cannot be written;
                PermissionError when the cache file is someone else's (see ``job_load``).
        """
        with self._lock:
            running = self._cached if self._cached is not None else (self if self._running else None)
            if running is not None:
                return running._state()
            path = self._cache_path(cached_path)
            cached = self._load_cached(path)
            if cached is not None:
                self._cached = cached
                return cached._state()
            self.apply()
            state = self._state()
            if path is not None:
                self.dump(path)
            return state

    def _cache_path(self, cached_path: str | os.PathLike[str] | None) -> str | None:
        if cached_path is AUTO:
            batch = os.environ.get(BATCH_ENV) == "1"
            return DEFAULT_JOB_PATH if (self._outlives_client or batch) else None
        return None if cached_path is None else os.fspath(cached_path)

    def _load_cached(self, path: str | None) -> JobTrait | None:
        """The job dumped at ``path`` if it still runs and can run this spec; a stale one is killed and removed."""
        if path is None:
            return None
        try:
            job = job_load(path)
        except FileNotFoundError:
            return None
        if not job.running:
            return None
        if job.can_run(self):
            return job
        _log.info("the cached job at %s cannot run %r: killing it and removing the cache", path, self)
        try:
            job._kill()
        except NotImplementedError:
            pass
        try:
            os.remove(os.path.realpath(path))
        except FileNotFoundError:
            pass
        return None

    def kill(self) -> None:
        """Stop the proc meshes spawned on the job's hosts and end the hosts; a no-op if not running."""
        with self._lock:
            cached, self._cached = self._cached, None
            if cached is not None:
                cached._kill()
            elif self._running:
                self._running = False
                self._kill()

    def dumps(self) -> bytes:
        """The job pickled (for :func:`job_loads` in a process of the same user; never send it elsewhere).

        Raises:
            pickle.PicklingError: the job holds something that cannot be pickled.
        """
        with self._lock:
            return pickle.dumps(self)

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`dumps` to ``path`` (following a symbolic link there), readable by you only (0600).

        A folder it creates is 0700. :func:`job_load` reads it back.

        Raises:
            OSError: the file or its folder cannot be written.
        """
        dump_job(self.dumps(), path)

    def __enter__(self) -> JobTrait:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.kill()

    @abc.abstractmethod
    def can_run(self, spec: JobTrait) -> bool:
        """Whether this job, running (typically loaded from a cache), can serve ``spec`` instead of a new allocation."""

    @abc.abstractmethod
    def _create(self) -> None:
        """Make the allocation (see the class docstring)."""

    @abc.abstractmethod
    def _state(self) -> JobState:
        """The host meshes of the running allocation."""

    @abc.abstractmethod
    def _kill(self) -> None:
        """Tear the allocation down."""


def job_loads(data: bytes) -> JobTrait:
    """The job pickled in ``data`` (from ``job.dumps()``). Only for bytes you made yourself: a pickle runs code.

    Raises:
        ArgumentTypeError: ``data`` is not bytes or holds no job.
        pickle.UnpicklingError: ``data`` is no pickle.
    """
    job: JobTrait = loads_checked(data, "job_loads()'s data", JobTrait)  # type: ignore[assignment]
    return job


def job_load(path: str | os.PathLike[str] = DEFAULT_JOB_PATH) -> JobTrait:
    """The job dumped to ``path`` by ``job.dump(path)`` (default ``.monarch/job_state.pkl``).

    Raises:
        FileNotFoundError: no such file.
        PermissionError: the file is someone else's or others may write it (a planted pickle runs code).
        ArgumentTypeError: it holds no job.
    """
    job: JobTrait = loads_checked(read_dump(path), os.fspath(path), JobTrait)  # type: ignore[assignment]
    return job


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
    ``tetrarch_select_backend`` hooks (their request holds ``request.meshes``: ``{name: hosts}``),
    else the highest priority. It is chosen when the job is applied.

    ``env`` is added to the environment of the host agents, and so of their procs.

    Its hosts end with the client process (an allocator's host agents exit when their
    client is gone), so no later run can reuse them: ``can_run`` is False and
    ``state()`` keeps no cache by default.

    Raises:
        ArgumentTypeError, ArgumentError: ``meshes`` is not a non-empty mapping of
            identifiers to positive ints, ``options`` is not a mapping, or ``env`` not a
            mapping of strings to strings.
    """

    def __init__(self, meshes: Mapping[str, int], *, allocator: str | None = None,
                 options: Mapping[str, object] | None = None, env: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._spec = _checked_meshes(meshes)
        if env is not None and (not isinstance(env, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            raise ArgumentTypeError(f"env must map variable names to string values, got {env!r}")
        self._env = dict(env or {})
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
        name = job_allocator(self._allocator, self._spec)
        started: dict[str, HostMesh] = {}
        try:
            for mesh_name, hosts in self._spec.items():
                mesh = HostMesh(Shape(Extent([HOSTS_DIM], [hosts])), None, allocator=name, owned=True,
                                name=mesh_name, options=self._options, env=self._env)
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

    def can_run(self, spec: JobTrait) -> bool:
        """False: the hosts of an allocator end with the client that started them, so a dump of this job never
        serves a later run."""
        return False

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_meshes"] = {}  # their host agents belong to this process
        return state

    def __repr__(self) -> str:
        chosen = f", allocator={self._allocator!r}" if self._allocator else ""
        return f"{type(self).__name__}({self._spec!r}{chosen})"


class ProcessJob(AllocatorJob):
    """Named host meshes whose hosts are processes on this machine (the ``local`` allocator).

    Monarch's multi-host test vehicle: ``ProcessJob({"trainers": 2, "dataloaders": 1})``.

    ``env`` is added to the environment of the host agents and their procs.

    Raises:
        ArgumentTypeError, ArgumentError: as :class:`AllocatorJob`.
    """

    def __init__(self, meshes: Mapping[str, int], env: Mapping[str, str] | None = None) -> None:
        super().__init__(meshes, allocator="local", env=env)

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

    def can_run(self, spec: JobTrait) -> bool:
        """False (as Monarch's): this host's agent ends with the client, so the spec itself is used."""
        return False

    def _run_client_script(self, client_script: str) -> None:
        """Run ``client_script`` with this Python in the background (its own session), as the job's client.

        Dumps a :class:`BatchJob` to ``.monarch/job_state.pkl`` (the script's ``state()``
        connects to it), sets ``MONARCH_BATCH_JOB=1`` for the script, and writes its
        stdout and stderr to ``stdout.log`` / ``stderr.log`` in a new folder under
        ``.monarch/logs`` (:attr:`log_dir`); :attr:`process` is the script's process.

        Raises:
            FileNotFoundError: ``client_script`` does not exist.
            OSError: the files cannot be written or Python cannot be started.
        """
        if not os.path.isfile(client_script):
            raise FileNotFoundError(f"apply(client_script={client_script!r}): no such file")
        BatchJob(self).dump(DEFAULT_JOB_PATH)
        base = os.path.join(os.path.dirname(DEFAULT_JOB_PATH), "logs")
        os.makedirs(base, mode=0o700, exist_ok=True)
        self._log_dir = tempfile.mkdtemp(prefix="job_", dir=base)
        env = {**os.environ, BATCH_ENV: "1"}
        with open(os.path.join(self._log_dir, "stdout.log"), "wb") as out, \
                open(os.path.join(self._log_dir, "stderr.log"), "wb") as err:
            self._proc = subprocess.Popen([sys.executable, client_script], env=env, stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=err, start_new_session=True)
        _log.info("started the client script %s (pid %d); its output is in %s", client_script, self._proc.pid,
                  self._log_dir)

    @property
    def process(self) -> subprocess.Popen:
        """The client script started by ``apply(client_script=...)``.

        Raises:
            ValueError: no client script was started.
        """
        proc = self.__dict__.get("_proc")
        if proc is None:
            raise ValueError("this LocalJob started no client script (apply(client_script=...))")
        return proc

    @property
    def log_dir(self) -> str | None:
        """The folder of the client script's ``stdout.log`` and ``stderr.log``, if one was started."""
        return self.__dict__.get("_log_dir")

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_proc", None)
        return state

    def __repr__(self) -> str:
        return f"LocalJob(hosts={self._names!r})"


class BatchJob(JobTrait):
    """What a batch-mode client script finds in ``.monarch/job_state.pkl``: the job that started it.

    It counts as running; ``can_run`` is True in the script (``MONARCH_BATCH_JOB=1``),
    whose ``state()`` then serves the wrapped job's hosts, and the job is killed when the
    script exits. Elsewhere it is False, so a stale file is replaced.
    """

    def __init__(self, job: JobTrait) -> None:
        super().__init__()
        self._job = job
        self._running = True
        self._apply_id = str(uuid.uuid4())

    def can_run(self, spec: JobTrait) -> bool:
        if os.environ.get(BATCH_ENV) == "1":
            atexit.register(self._kill)
            return True
        return False

    def _create(self) -> None:
        self._job._create()

    def _state(self) -> JobState:
        return self._job._state()

    def _kill(self) -> None:
        self._job._kill()

    def __repr__(self) -> str:
        return f"BatchJob({self._job!r})"


def _shutdown(meshes: Iterable[HostMesh]) -> None:
    futures: list[Future[None]] = [mesh.shutdown() for mesh in meshes]
    for fut in futures:
        fut.get()
