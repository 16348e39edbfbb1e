"""zmq's own gate (``Transport.use_key``): only peers with the allocation's key get past zmq's handshake.

What a user relies on: processes of one allocation connect as before; a process of another
allocation (or a stranger without the key) is refused in zmq's handshake, promptly and with a
message that says so, and never reaches the kernel's handler; the listener goes on serving.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tetrarch.plugins import Transport, TransportError
from tetrarch.testing import scaled
from tetrarch.testing.transport import Recorder, kernel_listening, transport_key
from tetrarch_transport_zmq._plugin import probe

pytestmark = [pytest.mark.skipif(not probe().ok, reason=probe().reason), pytest.mark.timeout(scaled(60))]

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))


@pytest.fixture
def make() -> Iterator[Any]:
    from tetrarch_transport_zmq._zmq import ZmqTransport

    made: list[Transport] = []

    def new(key: bytes | None) -> Transport:
        t = ZmqTransport()
        if key is not None:
            t.use_key(key)
        made.append(t)
        return t

    yield new
    for t in made:
        t.close()


@pytest.mark.parametrize("scheme", ["ipc", "tcp"])
def test_processes_with_the_same_key_connect_and_talk(make: Any, scheme: str) -> None:
    server, client = make(KEY), make(KEY)
    srec = Recorder()
    address = server.default_address(spans_hosts=False) if scheme == "ipc" else "zmq+tcp://127.0.0.1:0"
    listener = server.listen(address, srec)
    conn = client.connect(listener.address, Recorder(), timeout=scaled(10))
    conn.send([b"hello", b"world"])
    sconn = srec.wait_opened()
    assert [bytes(f) for f in srec.wait_messages(sconn, 1)[0]] == [b"hello", b"world"]


@pytest.mark.parametrize("dialer_key", [OTHER, None], ids=["another-allocation", "no-key"])
def test_a_dialer_without_the_key_is_refused_promptly_and_never_reaches_the_handler(
        make: Any, dialer_key: bytes | None) -> None:
    server = make(KEY)
    srec = Recorder()
    listener = server.listen(server.default_address(spans_hosts=False), srec)
    started = time.monotonic()
    with pytest.raises(TransportError, match="refused this process in zmq's handshake"):
        make(dialer_key).connect(listener.address, Recorder(), timeout=scaled(20))
    assert time.monotonic() - started < scaled(5), "a refused dialer waited for its timeout"
    assert srec.opened == [], "a peer without the key reached the kernel's handler"
    # the listener goes on serving the allocation's own processes
    make(KEY).connect(listener.address, Recorder(), timeout=scaled(10)).send([b"still here"])
    assert [bytes(f) for f in srec.wait_messages(srec.wait_opened(), 1)[0]] == [b"still here"]


def test_a_stranger_never_gets_a_frame_buffered(make: Any) -> None:
    """A raw zmq DEALER (no PLAIN) streams a multipart message it never ends: zmq refuses it in
    the handshake, so nothing of it is read or buffered, and it learns so from its monitor."""
    import zmq
    from zmq.utils.monitor import parse_monitor_message

    from tetrarch_transport_zmq._zap import HANDSHAKE_FAILED

    server = make(KEY)
    srec = Recorder()
    listener = server.listen(server.default_address(spans_hosts=False), srec)
    ctx = zmq.Context()
    stranger = ctx.socket(zmq.DEALER)
    stranger.setsockopt(zmq.LINGER, 0)
    monitor = stranger.get_monitor_socket()
    try:
        stranger.connect(listener.address.removeprefix("zmq+"))
        for _ in range(64):
            stranger.send(b"x" * 1024, zmq.SNDMORE | zmq.NOBLOCK)  # never a last part
        deadline = time.monotonic() + scaled(10)
        refused = False
        while not refused and time.monotonic() < deadline:
            if monitor.poll(100):
                refused = parse_monitor_message(monitor.recv_multipart())["event"] in HANDSHAKE_FAILED
        assert refused, "zmq did not refuse the stranger in its handshake"
        assert srec.opened == []
    finally:
        stranger.disable_monitor()
        monitor.close(0)
        stranger.close(0)
        ctx.term()


def test_the_key_comes_before_the_first_listen(make: Any) -> None:
    t = make(None)
    listener = t.listen(t.default_address(spans_hosts=False), Recorder())
    with pytest.raises(TransportError, match="before its first listen or connect"):
        t.use_key(KEY)
    listener.close()


def test_the_kernel_hands_its_transport_the_allocation_key_before_it_listens() -> None:
    import os

    from tetrarch_transport_zmq._zap import password_of
    from tetrarch_transport_zmq._zmq import ZmqTransport

    secret = os.urandom(32)
    key = transport_key(secret)
    assert len(key) == 32 and key != secret and key == transport_key(secret)
    transport = ZmqTransport()
    try:
        with kernel_listening(transport, secret):
            assert transport._password == password_of(key)
    finally:
        transport.close()
