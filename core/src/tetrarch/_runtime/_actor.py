"""``Actor`` base class and the ``@endpoint`` decorator."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

__all__ = ["Actor", "EndpointProperty", "concurrent_endpoint", "endpoint", "endpoints_of"]

F = TypeVar("F", bound=Callable[..., Any])


class Actor:
    """Base class of actors.

    Subclass it, give it ``@endpoint`` methods, and spawn it with
    ``proc_mesh.spawn(name, Class, *args, **kwargs)``: one instance runs in every proc
    of the mesh and handles one message at a time, in send order per sender.

    Optional hooks: ``__supervise__(self, failure)`` and ``__cleanup__(self, exc)``.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._tetrarch_endpoints = None  # recomputed lazily per class


class EndpointProperty(Generic[F]):
    """What ``@endpoint`` leaves on the class: the method plus its calling options.

    On an instance (inside the actor) it is the plain bound method; on an
    ``ActorMesh`` the same name is an :class:`~tetrarch.Endpoint` with the adverbs.
    """

    def __init__(self, fn: F, *, explicit_response_port: bool = False, propagate: Any = None,
                 instrument: bool = True, concurrent: bool = False) -> None:
        if not callable(fn):
            raise TypeError(f"@endpoint decorates a method, got {type(fn).__name__}")
        self.fn = fn
        self.name = fn.__name__
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)
        if concurrent and not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@concurrent_endpoint needs an 'async def' method; {fn.__qualname__} is not one "
                            f"(a sync endpoint blocks the actor's thread, so it cannot overlap)")
        self.concurrent = concurrent
        self.explicit_response_port = explicit_response_port
        self.propagate = propagate
        self.instrument = instrument
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        return self.fn.__get__(obj, objtype)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<endpoint {self.fn.__qualname__}>"


@overload
def endpoint(method: F) -> EndpointProperty[F]: ...


@overload
def endpoint(
    *, propagate: Any = None, explicit_response_port: bool = False, instrument: bool = True
) -> Callable[[F], EndpointProperty[F]]: ...


def endpoint(method: Any = None, *, propagate: Any = None, explicit_response_port: bool = False,
             instrument: bool = True) -> Any:
    """Mark an actor method as callable on meshes (sync or ``async def``).

    With ``explicit_response_port=True`` the method receives a reply ``Port`` first and
    answers through it instead of returning.

    Raises:
        TypeError: applied to something that is not callable.
    """

    def wrap(fn: F) -> EndpointProperty[F]:
        return EndpointProperty(fn, explicit_response_port=explicit_response_port, propagate=propagate,
                                instrument=instrument)

    return wrap(method) if method is not None else wrap


def concurrent_endpoint(method: Any = None, *, propagate: Any = None, explicit_response_port: bool = False,
                        instrument: bool = True) -> Any:
    """Like :func:`endpoint`, for an ``async def`` whose handlers may overlap.

    Messages still start in arrival order, but a concurrent handler does not wait
    for the previous one to finish: while it awaits, the next concurrent message
    starts. A plain (non-concurrent) message waits until every running handler has
    finished, and none starts while it runs. Stopping the actor cancels running
    concurrent handlers (their callers get SupervisionError) before ``__cleanup__``.

    Raises:
        TypeError: the method is not an ``async def``.
    """

    def wrap(fn: F) -> EndpointProperty[F]:
        return EndpointProperty(fn, explicit_response_port=explicit_response_port, propagate=propagate,
                                instrument=instrument, concurrent=True)

    return wrap(method) if method is not None else wrap


def endpoints_of(cls: type) -> dict[str, EndpointProperty]:
    """The endpoints of an actor class (inherited ones included), by name."""
    cached = cls.__dict__.get("_tetrarch_endpoints")
    if cached is not None:
        return cached
    found: dict[str, EndpointProperty] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, EndpointProperty):
                found[name] = value
            elif name in found:
                del found[name]  # overridden by a plain method
    try:
        cls._tetrarch_endpoints = found  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        pass
    return found
