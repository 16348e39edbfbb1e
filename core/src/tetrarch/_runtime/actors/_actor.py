"""``Actor`` base class and the ``@endpoint`` decorators.

``@endpoint`` leaves an :class:`EndpointProperty` on the class. Typed from the method's
signature: on an actor mesh (which ``spawn`` returns typed as the actor class), the
attribute is an ``Endpoint[P, R]`` whose adverbs take the method's parameters ``P`` and
give futures of its return value ``R`` (awaited for ``async def``).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
)

from ..._errors import ArgumentTypeError, NotSupportedError

if TYPE_CHECKING:
    from ..services._endpoint import Endpoint
    from ..services._port import Port

__all__ = ["Actor", "EndpointProperty", "concurrent_endpoint", "endpoint", "endpoints_of"]

P = ParamSpec("P")
R = TypeVar("R")


class Actor:
    """Base class of actors.

    Subclass it, give it ``@endpoint`` methods, and spawn it with
    ``proc_mesh.spawn(name, Class, *args, **kwargs)``: one instance runs in every proc
    of the mesh and handles one message at a time, in send order per sender.

    Optional hooks: ``__supervise__(self, failure)`` and ``__cleanup__(self, exc)``.
    """

    @functools.cached_property
    def logger(self) -> logging.Logger:
        """This actor's ``logging.Logger``, named after its class (``Trainer``), as Monarch's is.

        Usable in ``__init__``, endpoints and ``__cleanup__``. Its level is left unset, so it
        follows the proc's root logger: ``procs.logging_option(level=logging.INFO)`` shows
        ``self.logger.info(...)``, warnings show by default. Records made inside the actor
        (through this logger or any other) carry ``record.actor`` (``trainers[gpus=1]``), and
        the proc's default stderr handler writes them as ``[actor=trainers] INFO:Trainer:...``
        (the forwarded line's prefix names the rank).
        Assigning ``self.logger`` replaces it for the instance.
        """
        return logging.getLogger(type(self).__name__)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._tetrarch_endpoints = None  # type: ignore[attr-defined]  # recomputed lazily per class


def _check_options(propagate: Any, instrument: bool) -> None:
    """Options Monarch accepts that tetrarch does not implement yet: refuse them, never ignore them."""
    if propagate is not None:
        raise NotSupportedError("@endpoint(propagate=...) is Monarch's tensor-engine shape propagation, which "
                                  "tetrarch does not implement; remove the argument")
    if instrument:
        raise NotSupportedError("@endpoint(instrument=True) (per-endpoint tracing) is not implemented yet; "
                                  "remove the argument")


class EndpointProperty(Generic[P, R]):
    """What ``@endpoint`` leaves on the class: the method plus its calling options.

    On an instance (inside the actor) it is the plain bound method; on an
    ``ActorMesh`` the same name is an :class:`~tetrarch.Endpoint` with the adverbs.
    """

    def __init__(self, fn: Callable[..., Any], *, explicit_response_port: bool = False, propagate: Any = None,
                 instrument: bool = False, concurrent: bool = False) -> None:
        if not callable(fn):
            raise ArgumentTypeError(f"@endpoint decorates a method, got {type(fn).__name__}")
        _check_options(propagate, instrument)
        self.fn = fn
        self.name: str = fn.__name__
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)
        if concurrent and not inspect.iscoroutinefunction(fn):
            raise ArgumentTypeError(f"@concurrent_endpoint needs an 'async def' method; {fn.__qualname__} is not one "
                            f"(a sync endpoint blocks the actor's thread, so it cannot overlap)")
        self.concurrent = concurrent
        self.explicit_response_port = explicit_response_port
        self.owner = ""
        functools.update_wrapper(self, fn)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.owner = owner.__qualname__

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> EndpointProperty[P, R]: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> Endpoint[P, R]: ...

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        return self.fn.__get__(obj, objtype)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The method itself, called on the class with an actor instance first (``Base.method(self)``).

        Raises:
            TypeError: the first argument is not an actor instance (``Counter.incr()``):
                endpoints run on a mesh; the message says how to call them.
        """
        if not args or not isinstance(args[0], Actor):
            cls = self.owner or "TheActor"
            raise ArgumentTypeError(
                f"{cls}.{self.name} is an endpoint: it runs in an actor of a mesh, not on the class. Spawn the "
                f"actors (mesh = procs.spawn('name', {cls}, ...)) and call mesh.{self.name}.call(...), "
                f".call_one(...) or .broadcast(...); inside the actor, call self.{self.name}(...)"
            )
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<endpoint {self.fn.__qualname__}>"


class _Decorator(Protocol):
    """``@endpoint(...)`` with options: typed like ``@endpoint``."""

    @overload
    def __call__(self, method: Callable[Concatenate[Any, P], Awaitable[R]]) -> EndpointProperty[P, R]: ...

    @overload
    def __call__(self, method: Callable[Concatenate[Any, P], R]) -> EndpointProperty[P, R]: ...


class _PortDecorator(Protocol):
    """``@endpoint(explicit_response_port=True)``: the method answers through its first argument."""

    def __call__(self, method: Callable[Concatenate[Any, Port[R], P], object]) -> EndpointProperty[P, R]: ...


@overload
def endpoint(method: Callable[Concatenate[Any, P], Awaitable[R]]) -> EndpointProperty[P, R]: ...


@overload
def endpoint(method: Callable[Concatenate[Any, P], R]) -> EndpointProperty[P, R]: ...


@overload
def endpoint(*, propagate: Any = None, explicit_response_port: Literal[False] = False,
             instrument: bool = False) -> _Decorator: ...


@overload
def endpoint(*, propagate: Any = None, explicit_response_port: Literal[True],
             instrument: bool = False) -> _PortDecorator: ...


def endpoint(method: Any = None, *, propagate: Any = None, explicit_response_port: bool = False,
             instrument: bool = False) -> Any:
    """Mark an actor method as callable on meshes (sync or ``async def``).

    With ``explicit_response_port=True`` the method receives a reply ``Port`` first and
    answers through it instead of returning.

    Raises:
        TypeError: applied to something that is not callable.
        NotImplementedError: ``propagate=`` or ``instrument=True`` (Monarch options
            tetrarch does not implement yet).
    """

    def wrap(fn: Callable[..., Any]) -> EndpointProperty[Any, Any]:
        return EndpointProperty(fn, explicit_response_port=explicit_response_port, propagate=propagate,
                                instrument=instrument)

    return wrap(method) if method is not None else wrap


@overload
def concurrent_endpoint(method: Callable[Concatenate[Any, P], Awaitable[R]]) -> EndpointProperty[P, R]: ...


@overload
def concurrent_endpoint(*, propagate: Any = None, explicit_response_port: Literal[False] = False,
                        instrument: bool = False) -> _Decorator: ...


@overload
def concurrent_endpoint(*, propagate: Any = None, explicit_response_port: Literal[True],
                        instrument: bool = False) -> _PortDecorator: ...


def concurrent_endpoint(method: Any = None, *, propagate: Any = None, explicit_response_port: bool = False,
                        instrument: bool = False) -> Any:
    """Like :func:`endpoint`, for an ``async def`` whose handlers may overlap.

    Messages still start in arrival order, but a concurrent handler does not hold the
    actor: once it reaches its first ``await``, the next message starts, plain ones
    included (as in Monarch). So a plain endpoint may set an ``asyncio.Event`` that
    concurrent handlers wait for. Plain endpoints still run one at a time, and a
    concurrent message waits behind a running plain one. Stopping the actor cancels
    running concurrent handlers (their callers get SupervisionError) before
    ``__cleanup__``.

    Raises:
        TypeError: the method is not an ``async def``.
        NotImplementedError: ``propagate=`` or ``instrument=True``.
    """

    def wrap(fn: Callable[..., Any]) -> EndpointProperty[Any, Any]:
        return EndpointProperty(fn, explicit_response_port=explicit_response_port, propagate=propagate,
                                instrument=instrument, concurrent=True)

    return wrap(method) if method is not None else wrap


def endpoints_of(cls: type) -> dict[str, EndpointProperty[Any, Any]]:
    """The endpoints of an actor class (inherited ones included), by name."""
    cached = cls.__dict__.get("_tetrarch_endpoints")
    if cached is not None:
        return cached
    found: dict[str, EndpointProperty[Any, Any]] = {}
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
