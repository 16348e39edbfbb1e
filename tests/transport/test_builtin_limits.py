"""The builtin transport under a flood of connections keeps under its connection cap.

Issue 28, item 5: nothing capped the connections a process kept below its open-file limit.
(The conformance kit checks the rest for every transport: dials in a burst and into a full
backlog, ``tetrarch.testing._dialing``; a flood at an open-file limit of 1024, ``_preauth``.)
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest

from tetrarch._transport._socket import IpcTransport
from tetrarch.plugins import PreAuthLimits
from tetrarch.testing import scaled, still_open
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
        assert still_open(socks[cap:], scaled(5)) == [], "every connection past the cap is closed at once"
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
