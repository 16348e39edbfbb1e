"""A listener never leaves a message unread because one of its own sends took the wake-up.

The loop waits on each socket's ``ZMQ_FD``, which only says "look again": any call on the
socket (a send included) may consume the signal of a message that arrived meanwhile. The
listener's ROUTER is shared by all its peers, so a CLOSE it sends to one peer (``drop``)
while it reads may take the wake-up of another peer's message; a reader that is done with
its batch then never looks again. In the conformance kit's ``garbage clients`` test a dial
whose OPEN came while the listener closed the previous connection got no answer for 10 s.
"""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from tetrarch.plugins import PreAuthLimits
from tetrarch.testing import scaled
from tetrarch_transport_zmq._conn import OPEN
from tetrarch_transport_zmq._plugin import probe
from tetrarch_transport_zmq._zmq import ZmqTransport

pytestmark = [pytest.mark.skipif(not probe().ok, reason=probe().reason), pytest.mark.timeout(scaled(60))]


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    context: zmq.Context[Any] = zmq.Context()
    yield context
    context.destroy(linger=0)


def _dealer(ctx: zmq.Context[Any], address: str) -> zmq.Socket[Any]:
    """A bare DEALER on ``address``: it ignores the listener's CLOSE (stays connected, so no
    disconnect wakes the listener up)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address.removeprefix("zmq+"))
    return sock


def test_a_close_sent_while_reading_leaves_no_other_peers_message_unread(
        ctx: zmq.Context[Any], blocking_recorder: Callable[..., Any], until: Callable[..., None]) -> None:
    transport = ZmqTransport()
    transport.limit_unauthenticated(PreAuthLimits(timeout=scaled(60)))  # no deadline looks at the socket
    rec = blocking_recorder(close_when_released=True)
    try:
        listener = transport.listen(transport.default_address(spans_hosts=False), rec)
        a = _dealer(ctx, listener.address)
        a.send(OPEN)
        assert a.poll(scaled(10) * 1000) and a.recv() == OPEN, "the first peer was not let in"
        b = _dealer(ctx, listener.address)  # connected, handshake done; its OPEN comes later
        gate = listener._gate  # type: ignore[attr-defined]
        # The listener read the second accept (reading it later would look at the ROUTER again).
        until(lambda: len(gate) == 2, "the listener to see the second peer's accept")

        a.send(b"block")
        assert rec.blocking.wait(scaled(10)), "the listener never read the blocking message"
        b.send(OPEN)  # arrives while the I/O thread is in the handler, after its last look
        router_fd = listener._sock.getsockopt(zmq.FD)  # type: ignore[attr-defined]  # FD reads no command
        readable, _, _ = select.select([router_fd], [], [], scaled(10))
        assert readable, "the second peer's OPEN never reached the listener's socket"
        rec.release.set()  # the handler closes the first connection: a send on the same ROUTER

        assert b.poll(scaled(10) * 1000), (
            "the listener never answered an OPEN that came while it closed another connection")
        assert b.recv() == OPEN
        until(lambda: len(rec.opened) == 2, "on_open of the second peer (the listener answers OPEN first)")
    finally:
        rec.release.set()
        transport.close()
