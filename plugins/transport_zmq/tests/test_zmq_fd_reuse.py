"""A listener tells a dead peer from the new one that got its descriptor (zmq's SRCFD is reused).

The listener learns of a lost peer from its socket monitor's ``DISCONNECTED`` event,
which names the peer only by descriptor. When its I/O thread is busy (a long batch of
messages on a loaded machine), a peer can die and a new peer can be accepted on the same
descriptor and say ``OPEN`` before the thread reads that event. The event must then not
close the new peer's connection: in the kernel suite on zmq that closed a fresh proc's
connection to its owner, and the proc, believing its owner gone, exited with code 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from tetrarch.plugins import TransportError
from tetrarch.testing import scaled
from tetrarch.testing.transport import Recorder
from tetrarch_transport_zmq._plugin import probe
from tetrarch_transport_zmq._zmq import ZmqTransport

pytestmark = [pytest.mark.skipif(not probe().ok, reason=probe().reason), pytest.mark.timeout(scaled(60))]

# A peer in another process (so that only the listener's accepts take descriptors here):
# on a line on stdin dials argv[1], prints "open", answers "ping" with "pong", prints "closed" if closed.
_PEER = r"""
import sys, threading
from tetrarch_transport_zmq._zmq import ZmqTransport

class Peer:
    def on_open(self, conn): pass
    def on_message(self, conn, frames):
        if [bytes(f) for f in frames] == [b"ping"]:
            conn.send([b"pong"])
    def on_close(self, conn, error):
        print("closed", flush=True)

sys.stdin.readline()
ZmqTransport().connect(sys.argv[1], Peer(), timeout=60)
print("open", flush=True)
threading.Event().wait()
"""


def _go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def _target(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        return None


@pytest.fixture
def transports() -> Iterator[tuple[ZmqTransport, ZmqTransport]]:
    listening, dialing = ZmqTransport(), ZmqTransport()  # two I/O threads: one can block, one still sends
    yield listening, dialing
    dialing.close()
    listening.close()


def test_a_new_peer_on_a_dead_peers_descriptor_keeps_its_connection(
        transports: tuple[ZmqTransport, ZmqTransport], blocking_recorder: Callable[..., Any],
        until: Callable[..., None]) -> None:
    listening, dialing = transports
    rec = blocking_recorder()
    listener = listening.listen(listening.default_address(spans_hosts=False), rec)
    peers: list[subprocess.Popen[str]] = []

    def peer() -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", _PEER, listener.address], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        peers.append(proc)
        return proc

    try:
        old, new = peer(), peer()  # both now: starting one takes descriptors (its pipes) here
        _go(old)
        assert old.stdout is not None and old.stdout.readline().strip() == "open"
        old_conn = rec.wait_opened(1)
        fd = old_conn.fd  # type: ignore[attr-defined]
        old_socket = _target(fd)

        blocker = dialing.connect(listener.address, Recorder(), timeout=scaled(10))
        rec.wait_opened(2)
        blocker.send([b"block"])
        assert rec.blocking.wait(scaled(10)), "the listener never read the blocking message"

        # While the listener's thread is busy: the old peer dies, a new one takes its descriptor.
        old.send_signal(signal.SIGKILL)
        old.wait()
        until(lambda: _target(fd) != old_socket, "the listener's side of the dead peer's socket to close")
        _go(new)
        until(lambda: (_target(fd) or "").startswith("socket:"), "the new peer to be accepted")
        sock = listener._sock  # type: ignore[attr-defined]
        with listening._loop().lock_of(sock):  # its I/O thread is inside the handler, off the socket
            until(lambda: bool(sock.getsockopt(zmq.EVENTS) & zmq.POLLIN), "the new peer's OPEN to arrive")
        rec.release.set()

        new_conn = rec.wait_opened(3)
        assert new_conn.fd == fd, "the new peer did not get the dead peer's descriptor: nothing was tested"  # type: ignore[attr-defined]
        assert isinstance(rec.wait_closed(old_conn), TransportError)
        new_conn.send([b"ping"])
        (pong,) = rec.wait_messages(new_conn, 1)
        assert [bytes(f) for f in pong] == [b"pong"]
        assert rec.closes(new_conn) == [], "the dead peer's disconnect closed the new peer's connection"
        assert not new_conn.closed
    finally:
        rec.release.set()
        for proc in peers:
            proc.kill()
            proc.wait()
        listener.close()
