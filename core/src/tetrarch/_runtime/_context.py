"""Where code is running: ``context()``, ``current_rank()``, ``current_size()``."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from ._shape import Extent, Point

__all__ = ["Context", "Instance", "context", "current_actor_name", "current_rank", "current_size"]

_EMPTY = Extent([], [])


@dataclass(frozen=True, slots=True)
class Instance:
    """The running actor: its ``name``, ``rank`` (where it was spawned) and ids."""

    name: str
    actor_id: str
    class_name: str
    rank: Point
    proc_id: str
    proc_mesh: Any = None  # the ProcMesh it was spawned on, when known
    key: str = ""  # the actor's key in its proc (empty for the client)

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
        from ._root import get_root

        actor = get_root().runtime.actors.get(self.key) if self.key else None
        if actor is None:
            raise RuntimeError("abort() must be called from inside an actor; the client has no owner to report to")
        actor.fail(f"aborted: {reason or 'no reason provided'}")

    def __str__(self) -> str:
        return self.actor_id


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
    return dict(zip(info.labels, info.sizes)) if info is not None else {}


def current_actor_name() -> str:
    """A readable, unique name of the running actor (``<root>`` on the client)."""
    return str(context().actor_instance)
