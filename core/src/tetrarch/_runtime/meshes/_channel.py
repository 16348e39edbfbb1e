"""User entry points to ports: ``Channel``, :func:`send` and :class:`Accumulator`.

``Channel.open()`` returns a :class:`~._port.Port` (the sending end, picklable: pass it
to actors, return it from endpoints) and a :class:`~._port.PortReceiver` (the receiving
end, bound to this process). :func:`send` casts a call whose replies go to a port;
:class:`Accumulator` folds the replies of ``Endpoint.stream`` on the client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from ..._errors import ArgumentError, ArgumentTypeError
from ..process._root import get_root
from ..services._endpoint import Endpoint
from ..services._port import Port, PortReceiver
from ..values._future import Future

__all__ = ["Accumulator", "Channel", "send"]

R = TypeVar("R")
A = TypeVar("A")


class Channel(Generic[R]):
    """Opens port/receiver pairs: ``port, receiver = Channel.open()``."""

    @staticmethod
    def open(once: bool = False) -> tuple[Port[R], PortReceiver[R]]:
        """A new channel whose receiver lives in this process.

        With ``once=True`` the port accepts a single message (a second send raises
        ValueError) and the receiver closes after it.
        """
        rt = get_root().router
        receiver: PortReceiver[R] = PortReceiver(rt, once=once)
        return Port(rt.address, receiver._port, 0, once), receiver

    @staticmethod
    def open_ranked(once: bool = False) -> tuple[Port[R], PortReceiver[tuple[int, R]]]:
        """Like :meth:`open`, but ``recv()`` gives ``(rank, value)``.

        ``rank`` is the sender's index in the mesh a :func:`send` went to (0 for plain
        ``Port.send``).
        """
        rt = get_root().router
        receiver: PortReceiver[Any] = PortReceiver(rt, once=once, ranked=True)
        return Port(rt.address, receiver._port, 0, once), receiver


def send(endpoint: Endpoint[..., R], args: tuple = (), kwargs: dict[str, Any] | None = None,
         port: Port[R] | None = None, selection: str = "all") -> None:
    """Call ``endpoint`` and direct every reply to ``port`` (one message per actor).

    ``selection="all"`` casts to every actor of the endpoint's mesh, ``"choose"`` to one
    picked at random. Without a port the call is a ``broadcast``. An actor that raises
    sends an error (``recv()`` raises ActorError); one that dies, a SupervisionError.

    Raises:
        TypeError: ``endpoint`` is not an endpoint of a mesh, ``port`` is not a Port,
            ``args``/``kwargs`` are of the wrong kind, or an argument cannot be pickled.
        ValueError: ``selection`` is neither ``"all"`` nor ``"choose"``.
    """
    if not isinstance(endpoint, Endpoint):
        raise ArgumentTypeError(f"send() needs an @endpoint of an actor mesh (mesh.method), "
                                f"got {type(endpoint).__qualname__}")
    if port is not None and not isinstance(port, Port):
        raise ArgumentTypeError(f"send() port must be a Port from Channel.open(), got {type(port).__qualname__}")
    if not isinstance(args, tuple):
        raise ArgumentTypeError(f"send() args must be a tuple, got {type(args).__qualname__}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ArgumentTypeError(f"send() kwargs must be a dict, got {type(kwargs).__qualname__}")
    if selection not in ("all", "choose"):
        raise ArgumentError(f"send() selection must be 'all' or 'choose', got {selection!r}")
    endpoint._send_to_port(args, kwargs or {}, port, selection == "choose")


class Accumulator(Generic[R, A]):
    """Fold the replies of an endpoint's ``stream`` into one value, on the client.

    ``Accumulator(mesh.method, identity, combine).accumulate(*args)`` calls every actor
    and gives a future for ``combine(...combine(combine(identity, r1), r2)..., rn)``
    with the replies in arrival order (``identity`` for an empty mesh). ``combine`` runs
    in the thread that reads the future.
    """

    def __init__(self, endpoint: Endpoint[..., R], identity: A, combine: Callable[[A, R], A]) -> None:
        """Raises:
            TypeError: ``endpoint`` is not an ``@endpoint`` of a mesh, or ``combine`` is
                not callable.
        """
        if not isinstance(endpoint, Endpoint):
            raise ArgumentTypeError(f"Accumulator needs an @endpoint of an actor mesh (mesh.method), "
                            f"got {type(endpoint).__qualname__}")
        if not callable(combine):
            raise ArgumentTypeError(f"Accumulator combine must be callable, got {type(combine).__qualname__}")
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args: Any, **kwargs: Any) -> Future[A]:
        """Stream the call and fold the replies.

        Raises (from the future): the first reply's error (ActorError /
        SupervisionError), or what ``combine`` raised. Raises now: TypeError
        (unpicklable argument).
        """
        futures = list(self._endpoint.stream(*args, **kwargs))
        identity, combine = self._identity, self._combine
        out: Future[A] = Future._new()
        if not futures:
            out._set_result(identity)
            return out

        def fold() -> A:
            acc = identity
            for f in futures:
                acc = combine(acc, f.get())
            return acc

        def finish() -> None:
            out._set_lazy(fold)

        _when_all(futures, finish)
        return out


def _when_all(futures: Iterable[Future[Any]], then: Callable[[], None]) -> None:
    """Run ``then()`` once every future is done (on the thread completing the last)."""
    futures = list(futures)
    left = [len(futures)]
    lock = threading.Lock()

    def one(_: Future[Any]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            then()

    for f in futures:
        f.add_done_callback(one)

