"""A listener's gate: what a connection may cost before its OPEN (``Transport.limit_unauthenticated``).

libzmq accepts a connection, runs ZMTP's handshake (greeting, PLAIN HELLO, the ZAP request,
``_zap``) and only then hands over the dialer's first message, ``OPEN``; from ``on_open`` on,
the kernel bounds the connection itself. The stage before is held to the kernel's
:class:`~tetrarch.plugins.PreAuthLimits` here and in the socket options:

* **memory**: ``ZMQ_MAXMSGSIZE`` (``_conn.CHUNK``, 64 KiB) bounds every frame libzmq reads, a
  HELLO command included; with libzmq's own state for a connection in its handshake (about
  14-15 KiB, measured) a stalled stranger holds 86-88 KiB, under ``limits.max_bytes``.
* **time**: ``ZMQ_HANDSHAKE_IVL`` = ``limits.timeout`` ends a handshake libzmq still runs, and
  the gate ends a connection not OPENed ``limits.timeout`` after its accept (a peer with the
  key that never says OPEN gets past libzmq's handshake).
* **count**: at most ``limits.max_pending`` accepted connections wait for their OPEN (one more
  closes the oldest waiting); at most ``limits.connection_limit()`` connections are kept in
  all (this listener's and the loop's dialed ones): one accepted past it is closed at once,
  and the gate logs it (the first, then one line per :data:`LOG_EVERY_S` at most).
* **after a close**: a connection the listener closed (``CLOSE`` sent) whose peer does not
  hang up within ``limits.timeout`` is closed from this side.

How the gate sees connections: the listener's socket monitor reports each accept
(``EVENT_ACCEPTED``, whose value is the accepted descriptor) and each end
(``EVENT_DISCONNECTED``, same), in order; an ``OPEN`` names its descriptor (zmq's
``SRCFD``). How it closes one: libzmq has no call to drop one peer, so the gate shuts the
socket down (``shutdown(SHUT_RDWR)``) through a duplicate of its descriptor, which it then
closes; libzmq's next read on its own descriptor finds the end, it reports the disconnect and
closes that descriptor.

Descriptor numbers are reused, so a number alone never says which socket it is: the gate
records each accepted socket's identity (``st_dev``, ``st_ino``) when it reads the accept,
reads the monitor until it is empty *after* recording and before it acts (libzmq reports a
disconnect before it closes the descriptor, so a number closed and reused before the gate
recorded it has its disconnect read by then, which drops the wrong record), and shuts a
socket down only if the duplicate it holds is the recorded socket. A duplicate refers to the
socket itself: once its identity matched, no reuse can redirect the shutdown.

Why close through the descriptor at all: an accepted connection past the cap must go before
it costs a descriptor for long. libzmq 4.3 aborts the whole process when an ``ipc`` accept
finds no descriptor left (``Too many open files (src/ipc_listener.cpp:297)``), and over
``tcp`` it retries that accept in a busy loop; the cap, half the open-file limit by default,
keeps a flood away from that limit (``test_zmq_preauth.py`` floods a listener whose limit is
1024:1024).
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from tetrarch.plugins import PreAuthLimits

__all__ = ["LOG_EVERY_S", "Gate"]

_log = logging.getLogger("tetrarch.transport")

#: The most often the gate logs connections it refused past the cap.
LOG_EVERY_S = 10.0

_WAITING, _OPEN, _CLOSING = "waiting", "open", "closing"


@dataclass(slots=True)
class _Peer:
    """One accepted connection libzmq has not reported ended yet."""

    fd: int
    ident: tuple[int, int] | None  # (st_dev, st_ino) of the socket; None: closed before it was recorded
    since: float  # when it was accepted, opened or closed by us (its deadline's start)
    state: str  # _WAITING (no OPEN yet), _OPEN (the kernel's), _CLOSING (shut down or CLOSEd by us)
    shut: bool = False  # shut down already: nothing more to do but wait for its disconnect


def _identity(fd: int) -> tuple[int, int] | None:
    """The socket behind ``fd`` as ``(st_dev, st_ino)``, or None if ``fd`` is no socket now."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None


def shut_down(fd: int, ident: tuple[int, int] | None) -> bool:
    """Shut down the socket at ``fd`` if it still is ``ident``; False if it is not (or is gone).

    Through a duplicate: the check and the shutdown then name the same socket whatever
    happens to the number ``fd`` meanwhile. Never raises.
    """
    if ident is None:
        return False
    try:
        dup = os.dup(fd)
    except OSError:
        return False
    try:
        if _identity(dup) != ident:
            return False
        with socket.socket(fileno=dup) as sock:  # closes the duplicate
            dup = -1
            sock.shutdown(socket.SHUT_RDWR)
        return True
    except OSError:
        return False
    finally:
        if dup >= 0:
            os.close(dup)


class Gate:
    """The table of one listener's accepted connections and the limits it holds them to.

    Used on the loop's reading thread only. The listener feeds it the monitor's events in
    order (:meth:`accepted`, :meth:`disconnected`), then, with the monitor read empty, calls
    :meth:`enforce`; before a due deadline, the same (:meth:`due`, :meth:`enforce`).
    """

    def __init__(self, limits: PreAuthLimits, where: str, others: Callable[[], int]) -> None:
        """``where``: the listener's address (for the log); ``others``: connections the process
        keeps besides this listener's (its loop's dialed ones), counted against the cap."""
        self.limits = limits
        self._where = where
        self._others = others
        self._peers: dict[int, _Peer] = {}  # by descriptor: every accepted connection not reported ended
        self._waiting: OrderedDict[int, _Peer] = OrderedDict()  # no OPEN yet, oldest first
        self._closing: OrderedDict[int, _Peer] = OrderedDict()  # closed by us, peer still there, oldest first
        self._fresh: list[_Peer] = []  # accepted since the last enforce, in order
        self._refused = 0  # refused past the cap since the last log line
        self._logged = -LOG_EVERY_S

    def __len__(self) -> int:
        """Accepted connections libzmq still holds (waiting, open or closing)."""
        return len(self._peers)

    # -- the monitor's events, in order ------------------------------------------------
    def accepted(self, fd: int, now: float) -> None:
        """libzmq accepted a connection on ``fd`` (EVENT_ACCEPTED)."""
        old = self._peers.pop(fd, None)
        if old is not None:  # its end was never reported: forget it, the number is someone else's now
            self._waiting.pop(fd, None)
            self._closing.pop(fd, None)
        peer = _Peer(fd, _identity(fd), now, _WAITING)
        self._peers[fd] = peer
        self._waiting[fd] = peer
        self._fresh.append(peer)

    def disconnected(self, fd: int) -> None:
        """libzmq reported the connection on ``fd`` ended (EVENT_DISCONNECTED)."""
        if self._peers.pop(fd, None) is not None:
            self._waiting.pop(fd, None)
            self._closing.pop(fd, None)

    # -- the listener's own steps ----------------------------------------------------------
    def opened(self, fd: int) -> _Peer | None:
        """The peer on ``fd`` said OPEN: its record (keep it for :meth:`closed`), or None if the
        gate closed it meanwhile or it is gone already (ignore the OPEN).

        Call it with the monitor read (libzmq reports an accept before any of its messages, so
        with no record its end was read after its accept: an OPEN read late, after the hang-up
        of the peer that sent it).
        """
        peer = self._peers.get(fd)
        if peer is None or peer.state != _WAITING:
            return None
        del self._waiting[fd]
        peer.state = _OPEN
        return peer

    def closed(self, peer: _Peer, now: float) -> None:
        """The listener closed ``peer``'s connection (sent CLOSE): if the peer does not hang up
        within ``limits.timeout``, the gate closes it."""
        if self._peers.get(peer.fd) is peer and peer.state == _OPEN:
            peer.state = _CLOSING
            peer.since = now
            self._closing[peer.fd] = peer

    def due(self) -> float:
        """When the next deadline falls (``time.monotonic``); inf: none is pending."""
        due = float("inf")
        if self._waiting:
            due = next(iter(self._waiting.values())).since + self.limits.timeout
        if self._closing:
            due = min(due, next(iter(self._closing.values())).since + self.limits.timeout)
        return due

    def enforce(self, now: float) -> None:
        """Close what the limits say must go: past the cap, past max_pending, past a deadline.

        Call it with the monitor read until empty since the last :meth:`accepted` (see the
        module docstring: that is what makes every record name its own socket).
        """
        fresh, self._fresh = self._fresh, []
        cap = self.limits.connection_limit()
        over = len(self._peers) + self._others() - cap
        if over > 0:  # the newest go: those accepted past the cap
            for peer in reversed(fresh):
                if over <= 0:
                    break
                if peer.state == _WAITING:
                    self._close(peer, now)
                    self._refused += 1
                    over -= 1
        while len(self._waiting) > self.limits.max_pending:
            self._close(next(iter(self._waiting.values())), now)  # the oldest waiting
        deadline = now - self.limits.timeout
        for table in (self._waiting, self._closing):
            while table:
                peer = next(iter(table.values()))
                if peer.since > deadline:
                    break
                self._close(peer, now)
        if self._refused and now - self._logged >= LOG_EVERY_S:
            _log.warning("zmq listener %s refused %d connection(s): it keeps at most %d connections "
                         "(half the open-file limit unless configured); %d open now",
                         self._where, self._refused, cap, len(self._peers) + self._others())
            self._refused = 0
            self._logged = now

    def _close(self, peer: _Peer, now: float) -> None:
        """Shut ``peer``'s socket down; it stays counted until libzmq reports its end."""
        self._waiting.pop(peer.fd, None)
        self._closing.pop(peer.fd, None)
        peer.state = _CLOSING
        peer.since = now
        if not peer.shut:
            peer.shut = True
            if not shut_down(peer.fd, peer.ident):
                self._peers.pop(peer.fd, None)  # no longer that socket: its end is (or was) reported
