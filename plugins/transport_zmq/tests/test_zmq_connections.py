"""What zmq hides and the kernel needs: peer death seen per connection, stalled peers, limits before auth."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tetrarch.plugins import ConnectionClosed, Transport, TransportError
from tetrarch.testing import scaled
from tetrarch.testing.transport import Recorder
from tetrarch_transport_zmq._plugin import probe

pytestmark = [pytest.mark.skipif(not probe().ok, reason=probe().reason), pytest.mark.timeout(scaled(60))]

# A peer in another process: dials (or listens on) the address in argv, sends one message, waits to be killed.
_PEER = r"""
import sys, threading
from tetrarch_transport_zmq._zmq import ZmqTransport
from tetrarch.testing.transport import Recorder
t = ZmqTransport()
mode, address = sys.argv[1], sys.argv[2]
if mode == "dial":
    conn = t.connect(address, Recorder(), timeout=30)
    conn.send([b"alive"])
else:
    listener = t.listen(address, Recorder())
    print(listener.address, flush=True)
print("ready", flush=True)
threading.Event().wait()
"""


@pytest.fixture
def transport() -> Iterator[Transport]:
    from tetrarch_transport_zmq._zmq import ZmqTransport

    t = ZmqTransport()
    yield t
    t.close()


def _peer(mode: str, address: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-c", _PEER, mode, address], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    assert proc.stdout is not None
    lines = []
    while not lines or lines[-1] != "ready":
        line = proc.stdout.readline()
        assert line, f"the peer process exited early ({proc.wait()})"
        lines.append(line.strip())
    return proc, lines


@pytest.mark.parametrize("address", ["zmq+tcp://127.0.0.1:0", "zmq+ipc://@auto"])
def test_a_killed_dialer_closes_its_connection_on_the_listening_side(transport: Transport, address: str) -> None:
    if address.endswith("@auto"):
        address = transport.default_address(spans_hosts=False)
    rec = Recorder()
    listener = transport.listen(address, rec)
    proc, _ = _peer("dial", listener.address)
    try:
        conn = rec.wait_opened()
        rec.wait_messages(conn, 1)
        proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        error = rec.wait_closed(conn)
        took = time.monotonic() - killed
        assert took < scaled(2), f"the listener noticed the dead peer after {took:.2f} s"
        assert isinstance(error, TransportError), "a vanished peer is an error, not an orderly close"
        with pytest.raises(ConnectionClosed):
            conn.send([b"too late"])
    finally:
        proc.kill()
        proc.wait()
        listener.close()


def test_a_killed_listener_closes_the_dialed_connection(transport: Transport) -> None:
    proc, lines = _peer("listen", "zmq+tcp://127.0.0.1:0")
    try:
        rec = Recorder()
        conn = transport.connect(lines[0], rec, timeout=scaled(10))
        proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        error = rec.wait_closed(conn)
        took = time.monotonic() - killed
        assert took < scaled(2), f"the dialer noticed the dead listener after {took:.2f} s"
        assert isinstance(error, TransportError)
        with pytest.raises(ConnectionClosed):
            conn.send([b"too late"])
    finally:
        proc.kill()
        proc.wait()


def test_a_peer_stalled_mid_message_blocks_nobody(transport: Transport) -> None:
    rec = Recorder()
    listener = transport.listen("zmq+tcp://127.0.0.1:0", rec)
    host, port = listener.address.removeprefix("zmq+tcp://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=scaled(10)) as stalled:
            # Half a ZMTP greeting, then silence: the peer never finishes its handshake.
            stalled.sendall(b"\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f\x03")
            conn = transport.connect(listener.address, Recorder(), timeout=scaled(10))
            conn.send([b"hello", b"x" * (1 << 20)])
            sconn = rec.wait_opened()
            (frames,) = rec.wait_messages(sconn, 1)
            assert bytes(frames[0]) == b"hello" and len(frames[1]) == 1 << 20
            conn.close()
    finally:
        listener.close()


@pytest.mark.parametrize("frames", [[b"x" * 5000], [b""] * 600], ids=["bytes", "frames"])
def test_the_pre_auth_limit_closes_a_connection_without_delivering(transport: Transport, frames: list[bytes]) -> None:
    """The kernel's 4 KiB pre-auth limit: a bigger message, or one of 600 empty frames, closes the connection."""

    def pre_auth(conn: object) -> None:
        conn.max_message_size = 4096  # type: ignore[attr-defined]

    rec = Recorder(on_open_hook=pre_auth)
    listener = transport.listen(transport.default_address(spans_hosts=False), rec)
    try:
        crec = Recorder()
        conn = transport.connect(listener.address, crec, timeout=scaled(10))
        conn.send(frames)
        sconn = rec.wait_opened()
        assert isinstance(rec.wait_closed(sconn), TransportError)
        assert rec.messages(sconn) == []
        crec.wait_closed(conn)  # the dialer learns its connection is gone
        other = transport.connect(listener.address, Recorder(), timeout=scaled(10))
        other.send([b"small"])
        assert [bytes(f) for f in rec.wait_messages(rec.wait_opened(2), 1)[0]] == [b"small"]
        other.close()
    finally:
        listener.close()


def test_malformed_addresses_name_the_expected_form(transport: Transport) -> None:
    for bad in ("tcp://127.0.0.1:1", "zmq+tcp://127.0.0.1", "zmq+udp://h:1"):
        with pytest.raises(ValueError, match=r"zmq\+tcp://HOST:PORT"):
            transport.connect(bad, Recorder(), timeout=1)


def test_ipc_file_is_removed_on_close(transport: Transport, tmp_path) -> None:
    path = tmp_path / "zmq.sock"
    listener = transport.listen(f"zmq+ipc://{path}", Recorder())
    assert listener.address == f"zmq+ipc://{path}"
    conn = transport.connect(listener.address, Recorder(), timeout=scaled(10))
    conn.close()
    listener.close()
    transport.close()
    assert not path.exists()


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        lines = status.read().splitlines()
    for line in lines:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


_GREETING = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + bytes(31)
_READY = b"\x04\x1c\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER"


def test_a_stranger_streaming_one_huge_zmtp_frame_is_cut_off_before_libzmq_buffers_it() -> None:
    """ZMQ_MAXMSGSIZE: libzmq drops a peer announcing a frame over CHUNK, so it never buffers the payload."""
    proc, lines = _peer("listen", "zmq+tcp://127.0.0.1:0")
    try:
        host, port = lines[0].rpartition("//")[2].rsplit(":", 1)
        before = _peak_rss(proc.pid)
        stream = socket.create_connection((host, int(port)))
        stream.settimeout(scaled(10))
        sent = 0
        chunk = bytes(1 << 20)

        def stream_the_frame() -> None:
            nonlocal sent
            stream.sendall(_GREETING + _READY + bytes([0x02]) + (256 << 20).to_bytes(8, "big"))
            while sent < (64 << 20):
                stream.sendall(chunk)
                sent += len(chunk)

        with stream, pytest.raises(OSError):  # the listener hangs up on the announcement
            stream_the_frame()
        grown = _peak_rss(proc.pid) - before
        assert sent < (64 << 20) and grown < (16 << 20), (
            f"the listener took {sent >> 20} MiB of a frame announced as 256 MiB; peak RSS +{grown >> 20} MiB")
    finally:
        proc.kill()
        proc.wait()


def test_large_messages_stay_whole_while_other_threads_send_on_the_connection(transport: Transport) -> None:
    """A large message goes as several zmq messages; another thread's sends must not land between them.

    (The kernel answers a proc's pings from its I/O thread on the connection over which a
    user thread sends a 64 MiB argument: interleaved, the proc saw a broken protocol,
    dropped its connection to its owner and exited.)
    """
    rec = Recorder()
    listener = transport.listen(transport.default_address(spans_hosts=False), rec)
    try:
        conn = transport.connect(listener.address, Recorder(), timeout=scaled(10))
        big = bytes(range(256)) * (16 << 12)  # 16 MiB: 16 pieces
        n_big, n_small, n_threads = 8, 2000, 2
        errors: list[BaseException] = []

        def send_small(tag: bytes) -> None:
            try:
                for i in range(n_small):
                    conn.send([tag, i.to_bytes(4, "big")])
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)

        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # threads take turns often: what a loaded machine does now and then
        try:
            smalls = [threading.Thread(target=send_small, args=(b"small%d" % t,)) for t in range(n_threads)]
            for t in smalls:
                t.start()
            for _ in range(n_big):
                conn.send([b"big", big])
            for t in smalls:
                t.join(scaled(30))
        finally:
            sys.setswitchinterval(switch)
        sconn = rec.wait_opened()
        total = n_big + n_threads * n_small
        rec.wait(lambda: len(rec.messages(sconn)) == total or bool(rec.closes(sconn)), f"{total} messages or a close")
        assert rec.closes(sconn) == [], f"the listener closed the connection: {rec.closes(sconn)}"
        assert not errors, errors
        got = rec.messages(sconn)
        bigs = [m for m in got if bytes(m[0]) == b"big"]
        assert len(bigs) == n_big and all(m[1] == big for m in bigs)
        for t in range(n_threads):
            tag = b"small%d" % t
            assert [int.from_bytes(m[1], "big") for m in got if bytes(m[0]) == tag] == list(range(n_small))
        conn.close()
    finally:
        listener.close()
