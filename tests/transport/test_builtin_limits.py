"""The builtin transport under a flood of connections: it keeps under its connection cap,
never spins or dies when descriptors run out, and a dial into a full backlog waits.

Issue 28, items 5 and 10: a burst of dials used to fail at once with ``[Errno 11]`` (a
Unix-socket ``connect`` finds the listener's backlog full and does not wait as TCP does),
and nothing capped the connections a process kept below its open-file limit.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tetrarch._transport._socket import IpcTransport
from tetrarch.plugins import PreAuthLimits, TransportError
from tetrarch.testing import scaled
from tetrarch.testing.transport import Recorder

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(60))]


@pytest.fixture
def transport() -> Iterator[IpcTransport]:
    t = IpcTransport()
    yield t
    t.close()


def _abstract(address: str) -> str:
    assert address.startswith("ipc://@"), address
    return "\0" + address[len("ipc://@"):]


def _closed_by_peer(s: socket.socket, timeout: float) -> bool:
    s.settimeout(timeout)
    try:
        while s.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_connections_beyond_the_cap_are_refused_and_the_listener_keeps_serving(transport: IpcTransport) -> None:
    cap = 8
    transport.limit_unauthenticated(PreAuthLimits(max_connections=cap))
    server = Recorder()
    listener = transport.listen(transport.default_address(spans_hosts=False), server)
    with contextlib.ExitStack() as stack:
        socks = []
        for _ in range(cap + 5):
            s = stack.enter_context(socket.socket(socket.AF_UNIX))
            s.connect(_abstract(listener.address))
            socks.append(s)
        server.wait(lambda: len(server.opened) == cap, f"{cap} accepted connections")
        refused = [s for s in socks[cap:] if _closed_by_peer(s, scaled(5))]
        assert len(refused) == 5, "every connection past the cap is closed at once"
        assert len(server.opened) == cap, "a refused connection never reaches on_open"
        for s in socks[:cap]:
            s.close()
        server.wait(lambda: sum(bool(server.closes(c)) for c in server.opened) == cap, "the closes")
        # Below the cap again: a real dial gets in.
        client = transport.connect(listener.address, Recorder(), timeout=scaled(5))
        client.send([b"still serving"])
        server.wait(lambda: len(server.opened) == cap + 1, "the new connection")
        conn = server.opened[-1]
        assert [bytes(f) for f in server.wait_messages(conn, 1)[0]] == [b"still serving"]
        client.close()
    listener.close()


def test_a_dial_into_a_full_backlog_waits_for_its_timeout_instead_of_failing_at_once(
        transport: IpcTransport) -> None:
    name = f"tetrarch-full-backlog-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX) as full:
        full.bind("\0" + name)
        full.listen(0)  # nobody accepts: the backlog fills with a connection or two
        fillers = []
        try:
            while True:  # until the kernel says the backlog is full
                s = socket.socket(socket.AF_UNIX)
                s.setblocking(False)
                fillers.append(s)
                s.connect("\0" + name)
        except BlockingIOError:
            pass
        timeout = scaled(1.0)
        start = time.monotonic()
        with pytest.raises(TransportError, match="listen backlog stayed full"):
            transport.connect(f"ipc://@{name}", Recorder(), timeout=timeout)
        assert time.monotonic() - start >= timeout * 0.9, "the dial gave up before its timeout"
        for s in fillers:
            s.close()


def test_a_burst_of_dials_all_get_in(transport: IpcTransport) -> None:
    server = Recorder()
    listener = transport.listen(transport.default_address(spans_hosts=False), server)
    clients = IpcTransport()
    errors: list[BaseException] = []
    conns = []
    lock = threading.Lock()

    def dial() -> None:
        try:
            c = clients.connect(listener.address, Recorder(), timeout=scaled(10))
            with lock:
                conns.append(c)
        except BaseException as exc:  # noqa: BLE001 - reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=dial) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(scaled(30))
    assert not errors, errors[:3]
    assert len(conns) == 64
    clients.close()
    listener.close()
