"""get_or_spawn_controller(): one named singleton actor per process (Monarch's controllers).

The registry is this process's: a dict guarded by a lock, so two threads asking for the
same name at once get one actor. Controllers are spawned on ``this_proc()``, so they run
in the process that asked for them (the client, or the proc of the actor that asked).
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple, TypeVar, cast

from ..._errors import ArgumentError
from ..actors._actor import Actor
from ..values._future import Future
from ._proc_mesh import this_proc

__all__ = ["get_or_spawn_controller"]

A = TypeVar("A", bound=Actor)


class _Controller(NamedTuple):
    cls: type
    mesh: Any  # the one-actor ActorMesh spawn() returned


_lock = threading.Lock()
_controllers: dict[str, _Controller] = {}


def get_or_spawn_controller(name: str, Class: type[A], *args: Any, **kwargs: Any) -> Future[A]:
    """The singleton actor named ``name`` of this process, spawned on first use.

    The first call spawns ``Class(*args, **kwargs)`` on ``this_proc()`` (so the controller
    runs in this process); later calls with the same name return that same actor and
    ignore their ``args``/``kwargs``. Calls from several threads at once spawn it once.
    As in Monarch, the result is a Future: ``get_or_spawn_controller(...).get()`` (or
    ``await``) gives the actor mesh. It is already complete: the actor's ``__init__``
    runs before any message reaches it, as with ``spawn``.

    Raises:
        ArgumentError: ``name`` is already a controller of another class (the message
            names both classes).
        ArgumentTypeError: ``name`` is not a non-empty string, ``Class`` is not an Actor
            subclass, or the arguments do not fit its ``__init__`` (as ``ProcMesh.spawn``).
        MeshStoppedError: the proc to spawn on was stopped (as ``ProcMesh.spawn``).
    """
    with _lock:
        found = _controllers.get(name)
        if found is None:
            mesh = this_proc().spawn(name, Class, *args, **kwargs)  # raises before registering
            found = _controllers[name] = _Controller(Class, mesh)
        elif found.cls is not Class:
            raise ArgumentError(
                f"controller {name!r} is already a {found.cls.__module__}.{found.cls.__qualname__}, "
                f"not a {getattr(Class, '__module__', '?')}.{getattr(Class, '__qualname__', Class)!s}; "
                f"each name holds one actor class: pick another name")
    return cast(Future[A], Future._completed(found.mesh))
