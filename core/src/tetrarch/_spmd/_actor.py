"""SPMDActor: one rank of a torchrun-style program, with Monarch's endpoints."""

from __future__ import annotations

import gc
import os
import traceback
from typing import TYPE_CHECKING, Any

from .._runtime.actors._actor import Actor, endpoint
from .._runtime.values._context import current_rank
from ._abort import Hub, Link
from ._backend import BACKEND_ENV, sees_gpu
from ._env import RankInfo, torchrun_env
from ._guard import RunGuard
from ._store import StorePort, check_port_free, connect, master_host, preload_torch, require_torch, start_store
from ._target import RunAbortedError, Target, check_target, run_target

if TYPE_CHECKING:
    from torch.distributed import TCPStore

__all__ = ["SPMDActor"]

#: Runs whose stores rank 0 keeps: the current one and the one before (a slow peer may still close it).
_KEEP_RUNS = 2
#: The most of a failing rank's traceback that travels to the others (its end: the error itself).
_CAUSE_CHARS = 16 * 1024


def _rank_info() -> RankInfo:
    """This actor's ranks in the mesh (or slice) the current message was sent to."""
    point = current_rank()
    extent = point.extent
    return RankInfo.of(point.rank, extent.labels, extent.sizes)


class SPMDActor(Actor):
    """One rank of an SPMD (torchrun-style) program: sets torchrun's variables and runs the program.

    Ranks come from the mesh coordinates of the message (``current_rank()``): the last
    dimension is the local one (``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), ``RANK`` is the
    row-major rank, and a call on a slice uses the slice's ranks. See docs/spmd.md.

    Typical use (Monarch's)::

        am = procs.spawn("spmd", SPMDActor)
        addr, port = am.slice(gpus=0).get_host_port.call_one(None).get()
        am.main.call(addr, port, ["train.py", "--epochs", "2"]).get()
    """

    def __init__(self) -> None:
        preload_torch()
        info = _rank_info()
        self.rank: int = info.rank
        self.local_rank: int = info.local_rank
        self.world_size: int = info.world_size
        self.local_world_size: int = info.local_world_size
        self.nproc_per_node: int = info.local_world_size
        self.group_rank: int = info.group_rank
        self.group_world_size: int = info.group_world_size
        self._holders: list[TCPStore] = []
        self._run_stores: list[TCPStore] = []
        self._hubs: list[Hub] = []
        self._kept: list[Any] = []  # the last run's globals, freed when the next run starts

    def _setup_env(self, info: RankInfo, master_addr: str, master_port: int, *, agent_store: bool,
                   restart_count: int = 0, run_id: str = "none") -> None:
        os.environ.update(torchrun_env(info, master_addr, master_port, agent_store=agent_store,
                                       restart_count=restart_count, run_id=run_id))

    @endpoint
    def get_host_port(self, use_ipaddr: Any = None) -> tuple[str, int]:
        """Start a rendezvous store here and return ``(host, port)`` where it listens.

        The store listens (on loopback unless the allocation spans hosts) for as long as
        this actor lives: no other socket can take its port before ranks connect.
        ``use_ipaddr`` is accepted for Monarch compatibility; the host is always an address.

        Raises:
            ImportError: torch is not installed in this proc (names ``pip install torch``).
        """
        require_torch()
        store = start_store(master_host())
        self._holders.append(store)
        return master_host(), StorePort(store.port)

    @endpoint
    def sees_gpu(self) -> bool:
        """Whether this proc sees a GPU (``setup_torch_elastic_env`` agrees on a backend with it)."""
        require_torch()
        return sees_gpu()

    @endpoint
    def check_master_port(self, master_addr: str, master_port: int) -> None:
        """Raise unless ``master_port`` is free to bind on ``master_addr`` here (rank 0, before any rank starts).

        Raises:
            OSError: the port is in use, or the address is not one of this host's (the message names the fix).
        """
        check_port_free(master_addr, int(master_port))

    @endpoint
    def setup_env(self, master_addr: str, master_port: int, backend: str | None = None) -> None:
        """Set torchrun's variables for this rank (``init_process_group("env://")`` then works).

        A port from :meth:`get_host_port` makes every rank a client of that store
        (``TORCHELASTIC_USE_AGENT_STORE=True``); any other port is bound by rank 0's
        ``init_process_group``, as under plain torchrun.

        ``backend``: what :func:`~tetrarch.spmd.pick_backend` returns here from now on (the
        backend the whole world agreed on; ``setup_torch_elastic_env`` passes it).

        Raises:
            ValueError: the mesh has a dimension of size zero.
        """
        self._setup_env(_rank_info(), master_addr, master_port, agent_store=isinstance(master_port, StorePort))
        if backend is not None:
            os.environ[BACKEND_ENV] = backend

    @endpoint
    def main(self, master_addr: str, master_port: int, script_args: Target) -> Any:
        """Set torchrun's variables and run ``script_args`` on this rank as ``__main__``.

        ``script_args``: ``["train.py", *args]`` (``runpy.run_path``, ``sys.argv`` = the list),
        ``["-m", "pkg.mod", *args]`` (``runpy.run_module``, ``sys.argv = ["pkg.mod", *args]``),
        or a callable taking no arguments. With a port from :meth:`get_host_port`, each run gets
        a fresh store (rank 0 starts it; its address is exchanged through that port's store),
        so consecutive runs on the same procs never see each other's keys. A process group
        the program left initialized is destroyed when it returns.

        Returns:
            ``True`` for a script or module that ends (``sys.exit(0)`` included), else the callable's result.

        Raises:
            ValueError, FileNotFoundError, ModuleNotFoundError: the target cannot start
                (checked on every rank before any rendezvous).
            RankExitError: the program called ``sys.exit(status)`` with a status other than 0.
            RunAbortedError: another rank of the run failed first (it names that rank and
                carries its traceback); this rank's own error is the ``__cause__``.
            Exception: whatever the program raised.

        When a rank fails (raises, exits with a status other than 0, or its process dies), every
        other rank of the run is told at once (:mod:`tetrarch._spmd._abort`, with a port from
        :meth:`get_host_port`): one blocked in a collective that notices the lost peer (gloo) or
        that can be aborted (NCCL) raises ``RunAbortedError``; one still blocked a second later
        is stopped (its proc exits with status 75, a ``SupervisionError`` for the caller).
        See docs/spmd.md, "When a rank fails".
        """
        check_target(script_args)
        require_torch()
        # The previous run's objects go now, long after its last collective (see run_target).
        self._kept.clear()
        gc.collect()
        info = _rank_info()
        guard = RunGuard(info.rank)
        link: Link | None = None
        if isinstance(master_port, StorePort):
            master_addr, port, run, hub = self._rendezvous(info, master_addr, int(master_port))
            self._setup_env(info, master_addr, port, agent_store=True, restart_count=run,
                            run_id=f"tetrarch-{int(master_port)}")
            link = Link(hub[0], hub[1], hub[2], info.rank, guard.on_abort)
            # After the link: a rank that dies before it arrives aborts the others' wait.
            os.environ[BACKEND_ENV] = _agree_backend(master_addr, port, info.world_size)
        else:
            self._setup_env(info, master_addr, master_port, agent_store=False)
            os.environ.pop(BACKEND_ENV, None)  # no store to agree through: each rank picks its own
        try:
            result = run_target(script_args, info.rank, self._kept)
        except BaseException as exc:
            guard.finish()
            if link is not None:
                _report_failure(link, info.rank, exc)
            raise
        else:
            guard.finish()
            if link is not None:
                link.done()
            return result
        finally:
            if link is not None:
                link.close()
            _destroy_default_group()

    def _rendezvous(self, info: RankInfo, host: str, port: int) -> tuple[str, int, int, tuple[str, int, str]]:
        """This run's store and failure line: rank 0 starts both and publishes them in the store at ``host:port``.

        Runs are told apart by counting, per world size and rank, the arrivals at that store:
        the n-th run of a group of W ranks finds every one of its ranks at arrival n (runs of one
        group follow each other). Returns the run store's host and port, ``n - 1``, and the
        hub's ``(host, port, token)`` (see :mod:`._abort`).
        """
        holder = connect(host, port)
        arrival = holder.add(f"tetrarch/spmd/w{info.world_size}/rank{info.rank}", 1)
        key = f"tetrarch/spmd/w{info.world_size}/run{arrival}"
        if info.rank == 0:
            here = master_host()
            store = start_store(here)
            hub = Hub(here, info.world_size)
            self._run_stores.append(store)
            del self._run_stores[:-_KEEP_RUNS]
            self._hubs.append(hub)
            for old in self._hubs[:-_KEEP_RUNS]:
                old.close()
            del self._hubs[:-_KEEP_RUNS]
            holder.set(key, f"{here} {store.port} {hub.port} {hub.token}")
        addr, run_port, hub_port, token = holder.get(key).decode().split()
        return addr, int(run_port), arrival - 1, (addr, int(hub_port), token)


def _agree_backend(host: str, port: int, world_size: int) -> str:
    """``nccl`` if every rank of this run sees a GPU, ``gloo`` if none does (a barrier through the run's store).

    Raises:
        RuntimeError: some ranks see a GPU and some do not. A torchrun script that picks
            ``nccl`` by ``torch.cuda.is_available()`` would then mix nccl and gloo ranks that
            never meet (a hang until the store's timeout); every rank raises this instead.
    """
    store = connect(host, port)
    mine = sees_gpu()
    store.add("tetrarch/spmd/gpus", int(mine))
    if store.add("tetrarch/spmd/arrived", 1) == world_size:
        store.set("tetrarch/spmd/all-arrived", "1")
    store.wait(["tetrarch/spmd/all-arrived"])
    seeing = store.add("tetrarch/spmd/gpus", 0)
    if 0 < seeing < world_size:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise RuntimeError(
            f"{seeing} of the run's {world_size} ranks see a GPU and the others do not (this rank "
            f"{'does' if mine else 'does not'}; CUDA_VISIBLE_DEVICES={visible!r}): a program that picks nccl when "
            "torch.cuda.is_available() would mix nccl and gloo ranks that never meet. Spawn at most as many "
            "procs per host as it has GPUs (spawn_procs gives proc i of a 'gpus' dimension GPU i), or hide the "
            "GPUs from the procs (CUDA_VISIBLE_DEVICES= in the client's environment) to run on CPU")
    return "nccl" if seeing == world_size else "gloo"


def _report_failure(link: Link, rank: int, exc: BaseException) -> None:
    """Tell the run's failure line; raise :class:`RunAbortedError` if another rank failed first.

    The first failure keeps its own exception, with a note naming ranks that had already
    ended their program (one that ends early leaves the others in collectives it never joins).
    """
    text = "".join(traceback.format_exception(exc)).rstrip()
    cause = f"rank {rank}: " + (text if len(text) <= _CAUSE_CHARS else "..." + text[-_CAUSE_CHARS:])
    verdict = link.fail(cause)
    if not verdict.first:
        raise RunAbortedError(rank, verdict.rank, verdict.cause) from exc
    if verdict.ended:
        ended = ", ".join(map(str, verdict.ended))
        exc.add_note(f"tetrarch.spmd: rank(s) {ended} had already ended their program when rank {rank} failed; "
                     "a collective they never joined cannot finish")


def _destroy_default_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
