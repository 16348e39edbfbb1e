"""A reservation: procs and their SPMD ranks kept up between runs (reserve once, iterate).

:class:`Reservation` spawns ``nproc_per_node`` procs on every host of a host mesh, a
:class:`~tetrarch._spmd._proc_side.ServedRank` on each, and rank 0's rendezvous store; each
:meth:`Reservation.run` runs a program on all ranks through ``SPMDActor.main`` (a fresh
store per run) and returns a :class:`RunOutcome`, never raising for the program's failure.

After a failure the ranks that still run (blocked in a collective that can never finish)
are not waited for: the procs are killed at once and :meth:`Reservation.restart` spawns
fresh ones. When every rank ended (all raised, or ``sys.exit``), the procs are reused.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from .._config import STOP_TIMEOUT
from .._errors import ActorError, SupervisionError
from .._runtime.meshes._job import JobTrait, LocalJob, ProcessJob
from .._runtime.meshes._proc_mesh import HostMesh, ProcMesh
from .._runtime.meshes._shutdown import _kill_records
from .._runtime.process._root import get_root
from ._guard import GRACE_S
from ._proc_side import ServedRank
from ._target import RankExitError, RunAbortedError, Target

__all__ = ["Reservation", "RunOutcome", "make_job"]

#: How long setting up the ranks (importing torch, starting the store) may take, in seconds.
SETUP_TIMEOUT = 300.0
#: After the first failed rank, how long the others get to end before their procs are killed, in
#: seconds: a backstop. SPMDActor.main's failure line already stops a rank still blocked
#: ``GRACE_S`` after the abort (its proc exits with a line saying why, see ``_guard``); this
#: catches what that cannot (a rank whose failure line broke, a proc that will not exit).
FAILURE_GRACE = GRACE_S + 1.0
#: The name of the proc mesh: each line a rank prints reaches the caller as ``[ranks gpus=1] ...``.
MESH_NAME = "ranks"
LOCAL_DIM = "gpus"


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How one run ended (JSON-safe: it crosses the job server's socket as a dict).

    ``status``: what a command line exits with (0; the status of a rank's ``sys.exit``; else 1).
    ``kind``: ``""`` (success), ``"exception"`` (a rank raised), ``"exit"`` (``sys.exit(N)``,
    N != 0), ``"proc died"`` (a rank's process ended), ``"cancelled"`` (the caller went away).
    ``replaced``: the procs of the run were killed (fresh ones serve the next run).
    """

    ok: bool
    status: int = 0
    rank: int | None = None
    kind: str = ""
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    seconds: float = 0.0
    replaced: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunOutcome:
        """Raises ``TypeError`` for fields of the wrong type."""
        names = {f.name for f in fields(cls)}
        out = cls(**{k: v for k, v in data.items() if k in names})
        if not isinstance(out.ok, bool) or not isinstance(out.status, int) or \
                not (out.rank is None or isinstance(out.rank, int)):
            raise TypeError(f"malformed run outcome {data!r}")
        return out


def make_job(scheduler: str, nnodes: int, scheduler_cfg: dict[str, Any]) -> JobTrait:
    """The job whose ``state().workers`` hosts the ranks.

    ``"local"``: this machine (``LocalJob``) for one node, else ``nnodes`` host agents on this
    machine (``ProcessJob``, tetrarch's multi-host vehicle); ``"slurm"``: ``SlurmJob`` with
    ``nnodes`` nodes and ``scheduler_cfg`` as its options.

    Raises:
        ImportError: ``"slurm"`` without the Slurm plugin (names ``pip install "tetrarch[slurm]"``).
        TypeError: an option ``SlurmJob`` does not take.
    """
    if scheduler == "slurm":
        from tetrarch.job import SlurmJob

        return SlurmJob({"workers": nnodes}, **scheduler_cfg)
    return LocalJob(("workers",)) if nnodes == 1 else ProcessJob({"workers": nnodes})


def _rank_in(text: str, sizes: dict[str, int]) -> int | None:
    """The row-major rank of the first point ``{'hosts': 0, 'gpus': 2}`` (or ``2/4`` forms) in ``text``."""
    coords = dict(re.findall(r"'(\w+)': (\d+)", text))
    if not sizes or set(coords) != set(sizes):
        return None
    rank = 0
    for label, size in sizes.items():
        rank = rank * size + int(coords[label])
    return rank


def hard_stop(procs: ProcMesh) -> None:
    """Stop ``procs`` now: SIGKILL every proc (a rank blocked in a collective never stops by itself).

    Returns once their exits are reported and their last output lines were printed.
    """
    fut = procs.stop()
    hosts = procs._host_mesh._hosts if procs._host_mesh is not None else None
    alive = [p for p in procs._procs if not p.gone]
    if alive:
        _kill_records(get_root(), alive, [(h, None) for h in hosts or []])
    fut.get(timeout=STOP_TIMEOUT() + 10.0)


class Reservation:
    """Procs with a :class:`ServedRank` each on every host of ``hosts``, kept between runs.

    Thread safe: one run at a time (callers serialize runs); :meth:`cancel` may come from
    any thread while a run is in progress.
    """

    def __init__(self, hosts: HostMesh, nproc_per_node: int) -> None:
        self.hosts = hosts
        self.nproc_per_node = nproc_per_node
        self._lock = threading.Lock()
        self._procs: ProcMesh | None = None
        self._ranks: Any = None
        self._store: tuple[str, int] | None = None
        self._broken = False
        self._cancelled = False
        self.generation = 0  #: how many times procs were spawned

    @property
    def procs(self) -> ProcMesh | None:
        return self._procs

    @property
    def world_size(self) -> int:
        return (len(self.hosts._shape) or 1) * self.nproc_per_node

    @property
    def needs_restart(self) -> bool:
        """No procs, or they failed (a proc died between runs, or a run killed them)."""
        return self._procs is None or self._broken

    def lost_a_proc(self) -> bool:
        """Whether a proc of the current generation is gone."""
        procs = self._procs
        return procs is not None and any(p.gone for p in procs._procs)

    def mark_broken(self) -> None:
        """A proc of the reservation failed outside a run: spawn fresh ones before the next."""
        self._broken = True

    def start(self) -> None:
        """Spawn the procs and ranks, import torch on each, start rank 0's rendezvous store.

        Raises:
            ProcessStartError, ValueError: the procs could not be spawned.
            ActorError, SupervisionError, TimeoutError: a rank could not be set up (e.g. torch
                is missing there); the procs are stopped.
        """
        procs = self.hosts.spawn_procs(per_host={LOCAL_DIM: self.nproc_per_node}, name=MESH_NAME)
        try:
            ranks: Any = procs.spawn("spmd", ServedRank)
            ranks.warm.call().get(timeout=SETUP_TIMEOUT)
            first = ranks.slice(**dict.fromkeys(procs.sizes, 0))
            store = first.get_host_port.call_one(None).get(timeout=SETUP_TIMEOUT)
        except BaseException:
            hard_stop(procs)
            raise
        with self._lock:
            self._procs, self._ranks, self._store = procs, ranks, store
            self._broken = self._cancelled = False
            self.generation += 1

    def restart(self) -> None:
        """Kill the current procs (if any) and :meth:`start` fresh ones.

        Raises:
            Exception: as :meth:`start`.
        """
        self.stop(hard=True)
        self.start()

    def stop(self, hard: bool = False) -> None:
        """Stop the procs (``hard``: kill them now); a no-op without procs."""
        with self._lock:
            procs, self._procs, self._ranks, self._store = self._procs, None, None, None
        if procs is None:
            return
        if hard:
            hard_stop(procs)
        else:
            procs.stop().get(timeout=STOP_TIMEOUT() + 10.0)

    def cancel(self) -> None:
        """End the run in progress (its caller went away): kill the procs; it returns ``cancelled``."""
        with self._lock:
            procs = self._procs
            self._cancelled = True
            self._broken = True
        if procs is not None:
            hard_stop(procs)

    def pids(self) -> list[int]:
        """The process ids of the procs (empty without procs)."""
        procs = self._procs
        return [p.pid for p in procs._procs] if procs is not None else []

    def mark(self, token: str) -> None:
        """Have every rank write ``output_mark(token, fd)`` to its stdout and stderr (see ``_proc_side``)."""
        self._ranks.mark.call(token).get(timeout=SETUP_TIMEOUT)

    def run(self, program: Target, on_start: Callable[[], None] | None = None) -> RunOutcome:
        """Run ``program`` (``SPMDActor.main``'s script args or callable) on every rank; how it ended.

        At the first failed rank the others get :data:`FAILURE_GRACE` seconds to end; if one
        still runs (or a proc died) the procs are killed and ``replaced`` is set: call
        :meth:`restart` before the next run.

        Raises:
            RuntimeError: no procs (call :meth:`start` or :meth:`restart` first).
        """
        with self._lock:
            if self._procs is None or self._store is None:
                raise RuntimeError("the reservation has no procs: start() or restart() it first")
            procs, ranks, (addr, port) = self._procs, self._ranks, self._store
        t0 = time.monotonic()
        futures = list(ranks.main.stream(addr, port, program))
        if on_start is not None:
            on_start()
        first: BaseException | None = None
        for fut in futures:  # in the order the ranks end
            first = fut.exception()
            if first is not None:
                break
        if first is None:
            return RunOutcome(ok=True, seconds=time.monotonic() - t0)
        settled = not isinstance(first, SupervisionError) and _all_end(futures, time.monotonic() + FAILURE_GRACE)
        if not settled or self._cancelled:
            self._broken = True
            hard_stop(procs)
        outcome = self._outcome(_root_cause(first, futures), procs)
        return RunOutcome(**{**outcome.as_dict(), "seconds": time.monotonic() - t0, "replaced": self._broken})

    def _outcome(self, exc: BaseException, procs: ProcMesh) -> RunOutcome:
        if self._cancelled:
            return RunOutcome(ok=False, status=1, kind="cancelled", message="the run was cancelled: its caller "
                              "went away (the procs were killed and are replaced)")
        sizes = dict(procs.sizes)
        if isinstance(exc, ActorError):
            inner = exc.exception
            if isinstance(inner, RunAbortedError):  # every error we have is a consequence of another's
                return RunOutcome(ok=False, status=1, rank=inner.failed_rank, kind="exception",
                                  error_type=type(inner).__name__, message=str(inner))
            if isinstance(inner, RankExitError):
                return RunOutcome(ok=False, status=inner.status or 1, rank=inner.rank, kind="exit",
                                  error_type="RankExitError", message=str(inner))
            return RunOutcome(ok=False, status=1, rank=_rank_in(exc.actor, sizes), kind="exception",
                              error_type=type(inner).__name__, message=str(inner), traceback=exc.remote_traceback)
        if isinstance(exc, SupervisionError):
            return RunOutcome(ok=False, status=1, rank=_rank_in(str(exc), sizes), kind="proc died",
                              error_type="SupervisionError", message=str(exc))
        return RunOutcome(ok=False, status=1, kind="error", error_type=type(exc).__name__, message=str(exc))


def _aborted(exc: BaseException) -> bool:
    """Whether ``exc`` is a rank stopped because another rank failed first (``SPMDActor.main``'s abort)."""
    return isinstance(exc, ActorError) and isinstance(exc.exception, RunAbortedError)


def _root_cause(first: BaseException, futures: list[Any]) -> BaseException:
    """The error to report: the first that is not a rank stopped because of another, else ``first``."""
    errors = [first] + [e for f in futures if f.done() and (e := f.exception()) is not None and e is not first]
    return next((e for e in errors if not _aborted(e)), first)


def _all_end(futures: list[Any], deadline: float) -> bool:
    """Whether every future ends before ``deadline`` without a dead proc."""
    for fut in futures:
        try:
            exc = fut.exception(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return False
        if isinstance(exc, SupervisionError):
            return False
    return True
