"""Ports and channels: typed one-way message pipes between any two processes.

``Channel.open()`` returns a :class:`Port` (the sending end, picklable: pass it to
actors, return it from endpoints) and a :class:`PortReceiver` (the receiving end,
bound to this process). A port is just ``(address, port id, tag, once)``: wherever it
is unpickled, its sends go to the receiver it was opened for.

Wire format: a port message is ``[(PORT, port_id, tag, status), *payload]`` — the same
as the replies of endpoint calls, so a port can stand in for a call's reply port
(``@endpoint(explicit_response_port=True)`` and :func:`send`). ``OK`` carries a value,
``ERR`` an error record (``(exception, traceback text, actor, method)``, see
:func:`tetrarch._runtime.values._outcome.error_record`), ``DEAD`` the reason a sender died.

This module is the services layer's part (a port works with any router); the user
entry points ``Channel``, :func:`send` and ``Accumulator`` are in :mod:`._channel`.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any, Generic, TypeVar

from ..._errors import ArgumentError, ArgumentTypeError, SupervisionError, UsageError
from ..router._router import PeerUnreachable, Router, current_router
from ..values import _serial, _wire
from ..values._context import _current
from ..values._future import Future
from ..values._outcome import decode_error, error_record

__all__ = ["Port", "PortReceiver", "link_service"]

R = TypeVar("R")


def _runtime() -> Router:
    router = current_router()
    if router is None:  # a Port exists only where a runtime made or unpickled it
        raise UsageError("no tetrarch runtime in this process; open ports with Channel.open()")
    return router


def _here() -> str:
    """A name for the code that is running (the current actor, or ``client``)."""
    info = _current.get()
    return info.instance.name if info is not None else "client"


class Port(Generic[R]):
    """The sending end of a channel (or of a call's reply).

    Sends are fire and forget and arrive at the receiver in the order they were made
    from one thread. Picklable: a port passed to an actor (or returned from one) still
    delivers to the receiver it was opened for.

    If a receiver in another process was closed (or its process is gone) the message
    is dropped: sending never blocks on, nor waits for, the receiving side. Sending to
    a closed receiver of this process raises ValueError. A port with no
    receiver at all (the reply port of a ``broadcast``) drops every message.
    """

    __slots__ = ("_address", "_port", "_tag", "_once", "_used", "_what", "__weakref__")

    def __init__(self, address: str | None, port: int | None, tag: int = 0, once: bool = False,
                 what: str = "") -> None:
        self._address = address
        self._port = port
        self._tag = tag
        self._once = once
        self._used = False
        self._what = what  # "actor.method" for a call's reply port (error records)

    @property
    def once(self) -> bool:
        """Whether this port accepts only one message (``send`` or ``exception``)."""
        return self._once

    def send(self, obj: R) -> None:
        """Send ``obj`` to the receiver (fire and forget).

        Raises:
            TypeError: ``obj`` cannot be pickled (the message names its type).
            ValueError: this is a ``once`` port and it was already used, or its
                receiver is in this process and was closed.
        """
        payload = _serial.dumps_checked(obj, f"Port.send of {type(obj).__qualname__}", [("the value", obj)])
        self._post(_wire.OK, payload)

    def exception(self, exc: BaseException) -> None:
        """Make the receiver's ``recv()`` raise.

        The receiver raises :class:`~tetrarch.ActorError` whose ``.exception`` is ``exc``
        (or a ``RemoteException`` standing in for it when ``exc`` cannot be pickled) —
        the same error a caller gets when an endpoint raises.

        Raises:
            TypeError: ``exc`` is not an exception.
            ValueError: this is a ``once`` port and it was already used.
        """
        if not isinstance(exc, BaseException):
            raise ArgumentTypeError(f"Port.exception needs an exception instance, got {type(exc).__qualname__}")
        if self._what:
            actor, _, method = self._what.rpartition(".")
        else:
            actor, method = _here(), "port"
        self._post(_wire.ERR, _serial.dumps(error_record(exc, actor, method, skip=0)))

    def _post(self, status: int, payload: list) -> None:
        if self._once:
            if self._used:
                raise ArgumentError("this port was opened with once=True and has already been used; "
                                 "open a new channel (or once=False) to send more")
            self._used = True
        if self._address is None or self._port is None:
            return  # a dropping port
        rt = _runtime()
        if rt.is_local(self._address):
            receiver = _receivers.get(self._port)
            if receiver is not None and receiver._closed:
                raise ArgumentError(f"cannot send on port #{self._port}: its receiver was closed; open a new channel "
                                 f"(a receiver in another process that was closed drops messages instead)")
        frames = [_wire.port_header(self._port, self._tag, status), *payload]
        if rt.on_io_thread():  # it must not dial
            rt.send_later(self._address, frames)
            return
        try:
            rt.send(self._address, frames)
        except PeerUnreachable:
            pass  # the receiver's process is gone: the message is dropped

    def __reduce__(self) -> tuple:
        return (_rebuild_port, (self._address, self._port, self._tag, self._once))

    def __repr__(self) -> str:
        where = "dropping" if self._port is None else f"{self._address}#{self._port}"
        return f"<Port {where}{' once' if self._once else ''}>"


#: Receivers of this process by port id (for ``link`` messages).
_receivers: weakref.WeakValueDictionary[int, PortReceiver[Any]] = weakref.WeakValueDictionary()
_linked: set[tuple[str, int]] = set()


def _rebuild_port(address: str | None, port: int | None, tag: int, once: bool) -> Port[Any]:
    """Unpickle a port; in another process than its receiver's, link the two (once per process)
    so that the receiver learns if this process dies."""
    if address is not None and port is not None:
        rt = current_router()
        if rt is not None and not rt.is_local(address) and (address, port) not in _linked:
            _linked.add((address, port))
            rt.send_later(address, [_wire.sys_header(_wire.SVC_PORT, "link", rt.address, port)])
    return Port(address, port, tag, once)


def link_service(rt: Router) -> None:
    """Serve ``port``/``link`` on ``rt``: a process that holds one of our ports links to its receiver.

    If that process dies, the receiver gets one SupervisionError in its stream (after
    the messages that process already sent), so a ``recv()`` waiting for it does not hang.
    """

    def service(hdr: _wire.SysHeader, _payload: list, _conn: Any) -> None:
        holder, port = hdr.reply_addr, hdr.reply_port
        receiver = _receivers.get(port) if hdr.op == "link" and port is not None else None
        if receiver is None or port is None or not holder or rt.is_local(holder):
            return
        ref = weakref.ref(receiver)

        def died(why: str, port: int = port) -> None:
            me = ref()
            if me is not None:
                me._on_message(_wire.PortHeader(_wire.PORT, port, 0, _wire.DEAD),
                               _serial.dumps(f"the process at {holder} that held this port died ({why})"))

        rt.watch(holder, died)

    rt.add_service(_wire.SVC_PORT, service)


class PortReceiver(Generic[R]):
    """The receiving end of a channel, bound to the process that opened it.

    ``recv()`` returns a :class:`Future` for the next message; messages are handed out
    in arrival order. Use ``recv().get(timeout)`` to wait with a limit: a future that
    timed out keeps its place in line (the next message completes it), so wait on it
    again rather than calling ``recv()`` anew.
    """

    __slots__ = ("_port", "_rt", "_lock", "_queue", "_waiters", "_closed", "_once", "_ranked", "_keep",
                 "_finalizer", "__weakref__")

    def __init__(self, rt: Router, once: bool = False, ranked: bool = False) -> None:
        self._rt = rt
        self._lock = threading.Lock()
        self._queue: deque[tuple[int, int, list]] = deque()
        self._waiters: deque[Future[Any]] = deque()
        self._closed = False
        self._once = once
        self._ranked = ranked
        self._keep: PortReceiver[R] | None = None  # self, while futures wait on us
        ref = weakref.ref(self)

        def handler(hdr: _wire.PortHeader, payload: list) -> None:
            me = ref()
            if me is not None:
                me._on_message(hdr, payload)

        self._port = rt.open_port(handler)
        _receivers[self._port] = self
        # A receiver nobody can reach any more closes its port (its messages are dropped).
        self._finalizer = weakref.finalize(self, rt.close_port, self._port)

    def _on_message(self, hdr: _wire.PortHeader, payload: list) -> None:
        tag, status = hdr.tag, hdr.status
        with self._lock:
            if self._closed:
                return
            if self._once:
                self._closed = True
                self._rt.close_port(self._port)
            waiter = self._waiters.popleft() if self._waiters else None
            if waiter is None:
                self._queue.append((tag, status, payload))
            elif not self._waiters:
                self._keep = None
        if waiter is not None:
            waiter._set_lazy(lambda: self._decode(tag, status, payload))

    def _decode(self, tag: int, status: int, payload: list) -> Any:
        if status == _wire.DEAD:
            raise SupervisionError(f"a sender to this port died: {_serial.loads(payload)}", "port")
        if status != _wire.OK:
            raise decode_error(status, payload, "port")
        value = _serial.loads(payload)
        return (tag, value) if self._ranked else value

    def recv(self) -> Future[R]:
        """A future for the next message (the value, or ``(rank, value)`` for ``open_ranked``).

        Raises (from the future): ActorError (the sender called ``Port.exception``;
        ``.exception`` is what it passed), SupervisionError (an actor answering through
        this port died), EOFError (the receiver is closed and no message is left).
        """
        fut: Future[R] = Future._new()
        with self._lock:
            item = self._queue.popleft() if self._queue else None
            if item is None:
                if self._closed:
                    fut._set_exception(EOFError(f"Port closed: receiver #{self._port} was closed"))
                    return fut
                self._waiters.append(fut)
                self._keep = self
                return fut
        tag, status, payload = item
        fut._set_lazy(lambda: self._decode(tag, status, payload))
        return fut

    def close(self) -> None:
        """Stop receiving: later messages are dropped; waiting futures raise EOFError.

        Messages that already arrived can still be read with ``recv()``. Closing twice
        is a no-op.
        """
        with self._lock:
            if self._closed and not self._waiters:
                return
            self._closed = True
            waiters, self._waiters = list(self._waiters), deque()
            self._keep = None
        self._rt.close_port(self._port)
        for fut in waiters:
            fut._set_exception(EOFError(f"Port closed: receiver #{self._port} was closed"))

    def __reduce__(self) -> tuple:
        raise ArgumentTypeError("PortReceiver cannot be pickled: it stays in the process that opened the channel; "
                        "pass its Port instead")

    def __repr__(self) -> str:
        return f"<PortReceiver #{self._port}{' closed' if self._closed else ''}>"
