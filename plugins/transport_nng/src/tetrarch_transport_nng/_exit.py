"""Exit without threads inside nng: pynng's atexit ``nng_fini`` frees what they would use.

Without this a daemon thread still sending (a proc's output forwarder, a reply) calls into
nng after ``nng_fini`` and nng aborts the process (``panic: pthread_mutex_lock``); one that
dials (a heartbeat whose connection closed) gets SIGFPE inside nng. :func:`_close_at_exit`
(registered after pynng's own handler, so it runs first) shuts :data:`exit_gate` and closes
every transport in :data:`live`; a send then raises ConnectionClosed and a dial
TransportError without entering nng.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pynng  # noqa: F401 - pynng's atexit handler first: ours, registered below, runs before it

from tetrarch.plugins import TransportError

if TYPE_CHECKING:
    from tetrarch.plugins import Transport

__all__ = ["EXIT_WAIT", "ExitGate", "exit_gate", "live"]

#: Seconds exit waits for a sender still inside nng once its socket is closed.
EXIT_WAIT = 1.0


class ExitGate:
    """Keeps threads out of nng once the process exits.

    A ``connect`` or ``listen`` runs :meth:`inside` the gate; after :meth:`shut` they raise
    TransportError without entering nng. What a ``connect`` waits on is stopped by
    :meth:`shut` (:meth:`stopping`), so a dial waiting for its timeout returns at once.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shut = False
        self._inside = 0
        self._stops: dict[int, Callable[[], None]] = {}

    @property
    def is_shut(self) -> bool:
        """Whether :meth:`shut` ran."""
        return self._shut

    @contextlib.contextmanager
    def inside(self, address: str) -> Iterator[None]:
        """Run the block as a user of nng.

        Raises:
            TransportError: the process is exiting (:meth:`shut` ran).
        """
        with self._cond:
            if self._shut:
                raise TransportError(f"cannot use {address}: nng is shut down (this process is exiting)")
            self._inside += 1
        try:
            yield
        finally:
            with self._cond:
                self._inside -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def stopping(self, stop: Callable[[], None]) -> Iterator[None]:
        """Run the block with ``stop`` registered: :meth:`shut` calls it meanwhile, and it must
        make whatever the block waits on return (close the socket, set the event)."""
        with self._cond:
            self._stops[id(stop)] = stop
        try:
            yield
        finally:
            with self._cond:
                self._stops.pop(id(stop), None)

    def shut(self, wait: float) -> None:
        """Refuse new entries, stop the dials that wait, wait up to ``wait`` s for the rest to leave."""
        with self._cond:
            self._shut = True
            stops = list(self._stops.values())
        for stop in stops:
            try:
                stop()
            except Exception:  # noqa: BLE001 - closing what nng or the OS closed already
                pass
        with self._cond:
            self._cond.wait_for(lambda: self._inside == 0, wait)


exit_gate = ExitGate()
#: Every transport of this process, closed at exit before pynng's ``nng_fini`` runs.
live: weakref.WeakSet[Transport] = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    """Close every transport before pynng's atexit ``nng_fini`` frees nng's state."""
    exit_gate.shut(EXIT_WAIT)
    for transport in list(live):
        try:
            transport.close()
        except Exception:  # noqa: BLE001 - exiting: close what can be closed
            pass
