"""Dialing under load, part of :class:`~tetrarch.testing.transport.TransportConformance`.

* A burst of dials (many threads at once) all get in: none fails because the listener's
  accept queue was momentarily full.
* A dial into a Unix socket whose listen backlog is full does not fail at once: a Unix
  socket's ``connect`` reports EAGAIN immediately where TCP would retry its SYN by itself,
  so a transport must retry (or wait) until its ``connect`` timeout, then raise
  ``TransportError``. Runs where the transport's address is a Unix socket (``ipc``).
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tetrarch._transport._base import Connection, Listener, Transport, TransportError

from ._kit import bounded
from ._raw_sock import raw_sockaddr
from ._recorder import Recorder
from ._timing import scaled

__all__ = ["DialConformance"]

#: Threads that dial one listener at the same moment.
BURST = 64


class DialConformance:
    """Mixin: the dialing tests. Uses the ``transport``, ``client_transport``, ``address`` and
    ``server`` fixtures of :class:`~tetrarch.testing.transport.TransportConformance`."""

    @bounded
    def test_a_burst_of_dials_all_get_in(self, client_transport: Transport, server: tuple[Listener, object]) -> None:
        listener, _recorder = server
        errors: list[BaseException] = []
        conns: list[Connection] = []
        lock = threading.Lock()
        start = threading.Barrier(BURST)

        def dial() -> None:
            try:
                start.wait(scaled(10))
                conn = client_transport.connect(listener.address, Recorder(), timeout=scaled(10))
                with lock:
                    conns.append(conn)
            except BaseException as exc:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(exc)

        threads = [threading.Thread(target=dial) for _ in range(BURST)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(scaled(30))
        try:
            assert not errors, f"{len(errors)} of {BURST} simultaneous dials failed, e.g. {errors[0]!r}"
            assert len(conns) == BURST
        finally:
            for conn in conns:
                conn.close()

    @bounded
    def test_a_dial_into_a_full_backlog_waits_for_its_timeout(self, client_transport: Transport,
                                                               address: str) -> None:
        raw = raw_sockaddr(address)
        if raw is None or raw[0] != socket.AF_UNIX:
            pytest.skip("only a Unix-socket dial meets a full backlog at once (TCP retries its SYN by itself)")
        scheme = address[: address.index("://") + 3]
        name = f"tetrarch-full-backlog-{time.monotonic_ns()}"
        with socket.socket(socket.AF_UNIX) as full:
            full.bind("\0" + name)
            full.listen(0)  # nobody accepts: the backlog is full after a connection or two
            fillers: list[socket.socket] = []
            try:
                while len(fillers) < 10_000:
                    s = socket.socket(socket.AF_UNIX)
                    s.setblocking(False)
                    fillers.append(s)
                    s.connect("\0" + name)
            except BlockingIOError:
                pass
            try:
                timeout = scaled(1.0)
                began = time.monotonic()
                with pytest.raises(TransportError):
                    client_transport.connect(f"{scheme}@{name}", Recorder(), timeout=timeout)
                waited = time.monotonic() - began
                assert waited >= 0.9 * timeout, (
                    f"a dial into a full backlog gave up after {waited:.2f} s, before its {timeout:g} s timeout "
                    f"(a Unix socket's connect reports EAGAIN at once: retry until the timeout)")
            finally:
                for s in fillers:
                    s.close()
