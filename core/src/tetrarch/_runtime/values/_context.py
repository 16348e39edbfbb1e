"""Where code is running: ``context()``, ``current_rank()``, ``current_size()``."""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..._errors import UsageError
from ._shape import Extent, Point

__all__ = ["Context", "Instance", "ProcMeshLike", "actor_label", "context", "current_actor_name", "current_rank",
           "current_size", "install_log_context"]


class ProcMeshLike(Protocol):
    """What an actor knows of the proc mesh it was spawned on (a ``ProcMesh``)."""

    def slice(self, **kw: Any) -> Any:
        """The sub-mesh at the given coordinates."""
        ...

    def spawn(self, name: str, cls: type, *args: Any, **kwargs: Any) -> Any:
        """Spawn an actor mesh on these procs."""
        ...


class Abortable(Protocol):
    """The runtime side of a running actor, as :meth:`Instance.abort` needs it."""

    def fail(self, cause: str) -> None:
        """The actor dies with ``cause``."""
        ...

_EMPTY = Extent([], [])


@dataclass(frozen=True, slots=True)
class Instance:
    """The running actor: its ``name``, ``rank`` (where it was spawned) and ids."""

    name: str
    actor_id: str
    class_name: str
    rank: Point
    proc_id: str
    proc_mesh: ProcMeshLike | None = None  # the ProcMesh it was spawned on, when known
    key: str = ""  # the actor's key in its proc (empty for the client)
    #: The runner executing this actor (None for the client); set by the runner.
    _runner: Abortable | None = field(default=None, compare=False, repr=False)

    @property
    def proc(self) -> Any:
        """This actor's proc as a one-proc ProcMesh (``None`` where unknown)."""
        if self.proc_mesh is None:
            return None
        return self.proc_mesh.slice(**dict(self.rank)) if len(self.rank) else self.proc_mesh

    def abort(self, reason: str | None = None) -> None:
        """Fail this actor on purpose: it dies and a MeshFailure carrying ``reason`` goes to
        its owner. The message being handled gets SupervisionError instead of its result.

        Raises:
            RuntimeError: called outside an actor (on the client).
        """
        if self._runner is None:
            raise UsageError("abort() must be called from inside an actor; the client has no owner to report to")
        self._runner.fail(f"aborted: {reason or 'no reason provided'}")

    def __str__(self) -> str:
        return self.actor_id

    def __reduce__(self) -> tuple:  # the runner stays in its process
        return (Instance, (self.name, self.actor_id, self.class_name, self.rank, self.proc_id, self.proc_mesh,
                           self.key))


class _MessageInfo:
    """Who handles the current message, and its rank in the slice it was sent to."""

    __slots__ = ("instance", "rank", "labels", "sizes")

    def __init__(self, instance: Instance, rank: int, labels: tuple[str, ...], sizes: tuple[int, ...]) -> None:
        self.instance = instance
        self.rank = rank
        self.labels = labels
        self.sizes = sizes


_current: contextvars.ContextVar[_MessageInfo | None] = contextvars.ContextVar("tetrarch_message", default=None)
_ROOT = Instance("<root>", "<root>", "client", Point(0, _EMPTY), "client")


class Context:
    """What the current code runs as (an actor handling a message, or the client)."""

    __slots__ = ("_info",)

    def __init__(self, info: _MessageInfo | None) -> None:
        self._info = info

    @property
    def actor_instance(self) -> Instance:
        return self._info.instance if self._info is not None else _root_instance()

    @property
    def message_rank(self) -> Point:
        """This actor's coordinate in the mesh slice the current message was sent to."""
        info = self._info
        if info is None:
            return Point(0, _EMPTY)
        return Point(info.rank, Extent(info.labels, info.sizes))


def _root_instance() -> Instance:
    return _ROOT


def context() -> Context:
    """The current actor's context (the root client's outside actors)."""
    return Context(_current.get())


def current_rank() -> Point:
    """This actor's rank within the mesh the current message was sent to."""
    return context().message_rank


def current_size() -> dict[str, int]:
    """Sizes of the mesh the current message was sent to, by dimension."""
    info = _current.get()
    return dict(zip(info.labels, info.sizes, strict=True)) if info is not None else {}


def current_actor_name() -> str:
    """A readable, unique name of the running actor (``<root>`` on the client)."""
    return str(context().actor_instance)


def actor_label(instance: Instance) -> str:
    """How log records name an actor: its mesh name and rank, ``trainers[gpus=1]`` (``name`` alone for a singleton)."""
    rank = instance.rank
    if not len(rank):
        return instance.name
    return f"{instance.name}[{','.join(f'{k}={v}' for k, v in rank.items())}]"


_installed: list[bool] = [False]


def install_log_context() -> None:
    """Give every ``logging.LogRecord`` made in this process an ``actor`` attribute.

    ``record.actor`` is the label of the actor whose endpoint, ``__init__`` or ``__cleanup__``
    made the record (:func:`actor_label`), ``""`` outside actors; ``record.actor_name`` is its
    mesh name alone (what the forwarded stderr format shows: the line's prefix already names the
    proc's coordinates, and lines that differ only in rank still fold). Any logger counts, not only
    ``Actor.logger``: the actor is found through the context the runner sets per message, so the
    cost is one context-variable read per record and nothing on the call path. Idempotent; wraps
    whichever record factory is installed already.
    """
    if _installed[0]:
        return
    _installed[0] = True
    previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        info = _current.get()
        record.actor = actor_label(info.instance) if info is not None else ""
        record.actor_name = info.instance.name if info is not None else ""
        return record

    logging.setLogRecordFactory(factory)
