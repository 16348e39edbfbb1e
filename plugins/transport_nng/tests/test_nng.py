"""What the nng transport adds to the contract: chunks, the pre-auth bound, stalls, peer death, dials, exit."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tetrarch.plugins.transport import PRE_AUTH_LIMIT, TransportError, as_bytes
from tetrarch.testing import scaled
from tetrarch.testing.transport import Recorder

pynng = pytest.importorskip("pynng")

from tetrarch_transport_nng._conn import CHUNK, PAIR0_HEADER, new_msg  # noqa: E402
from tetrarch_transport_nng._nng import NngTransport  # noqa: E402

pytestmark = pytest.mark.timeout(scaled(60))


@pytest.fixture
def transport() -> Iterator[NngTransport]:
    t = NngTransport()
    yield t
    t.close()


def _limited(conn) -> None:
    conn.max_message_size = PRE_AUTH_LIMIT  # what the kernel sets before the peer authenticated


@pytest.mark.parametrize("address", ["nng+ipc://@", "nng+tcp://127.0.0.1:0"])
def test_chunked_message_arrives_whole_in_adoptable_buffers(transport: NngTransport, address: str) -> None:
    if address.endswith("@"):
        address = transport.default_address(spans_hosts=False)
    srec = Recorder()
    listener = transport.listen(address, srec)
    conn = transport.connect(listener.address, Recorder(), timeout=scaled(10))
    big = bytes(range(256)) * (CHUNK // 64)  # 4 chunks' worth
    sent = [b"head", big, b"", b"tail" * 10]
    conn.send_many([[b"small"], sent, [b"after"]])
    got = srec.wait_messages(srec.wait_opened(), 3)
    assert [[bytes(f) for f in m] for m in got] == [[b"small"], sent, [b"after"]]
    adopted = as_bytes(got[1][1])
    assert adopted == big and as_bytes(got[1][1]) is adopted, "a large frame was copied to become bytes"
    conn.close()
    listener.close()


def test_unauthenticated_peer_announcing_a_huge_message_is_cut_off(transport: NngTransport) -> None:
    """The first chunk's header is enough: the announced size is never allocated nor awaited."""
    srec = Recorder(on_open_hook=_limited)
    listener = transport.listen(transport.default_address(spans_hosts=False), srec)
    conn = transport.connect(listener.address, Recorder(), timeout=scaled(10))
    sconn = srec.wait_opened()
    msg, body = new_msg(12 + 100)  # one frame announced at 1 TiB, 100 bytes of it sent
    header = struct.pack("!IQ", 1, 1 << 40)
    pynng.ffi.memmove(body, header, len(header))
    conn._sendmsg(msg)
    error = srec.wait_closed(sconn)
    assert "1099511627776-byte message" in str(error)
    assert srec.messages(sconn) == []
    listener.close()


def test_peer_stalled_mid_message_blocks_nobody(transport: NngTransport) -> None:
    srec = Recorder()
    listener = transport.listen(transport.default_address(spans_hosts=False), srec)
    stalled = transport.connect(listener.address, Recorder(), timeout=scaled(10))
    s_stalled = srec.wait_opened(1)
    msg, body = new_msg(CHUNK)  # the first chunk of a 1 MiB message, and nothing more
    header = struct.pack("!IQ", 1, 1 << 20)
    pynng.ffi.memmove(body, header, len(header))
    stalled._sendmsg(msg)
    healthy = transport.connect(listener.address, Recorder(), timeout=scaled(10))
    s_healthy = srec.wait_opened(2)
    for i in range(100):
        healthy.send([struct.pack("!I", i), b"x" * 1000])
    got = srec.wait_messages(s_healthy, 100)
    assert [struct.unpack("!I", bytes(m[0]))[0] for m in got] == list(range(100))
    assert not s_stalled.closed and srec.messages(s_stalled) == []
    listener.close()


_PEER = """
import sys, time
from tetrarch.testing.transport import Recorder
from tetrarch_transport_nng._nng import NngTransport
conn = NngTransport().connect(sys.argv[1], Recorder(), timeout=10)
conn.send([b"alive"])
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("address", ["ipc", "nng+tcp://127.0.0.1:0"])
def test_killed_peer_closes_its_connection_at_once(transport: NngTransport, address: str) -> None:
    """A proc that dies (SIGKILL: no goodbye) is noticed well within supervision's 2 s."""
    if address == "ipc":
        address = transport.default_address(spans_hosts=False)
    srec = Recorder()
    listener = transport.listen(address, srec)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    peer = subprocess.Popen([sys.executable, "-c", _PEER, listener.address], stdout=subprocess.PIPE, env=env)
    try:
        assert peer.stdout is not None
        assert peer.stdout.readline().strip() == b"ready"
        sconn = srec.wait_opened()
        srec.wait_messages(sconn, 1)
        killed = time.monotonic()
        peer.send_signal(signal.SIGKILL)
        srec.wait_closed(sconn)
        assert time.monotonic() - killed < scaled(2.0)
    finally:
        peer.kill()
        peer.wait(scaled(10))
        listener.close()


@pytest.mark.parametrize("kind", ["ipc", "tcp"])
def test_a_dial_to_something_else_fails_at_once_and_says_what_it_found(transport: NngTransport, kind: str) -> None:
    """A listener of another nng protocol (the previous plugin's rep0 rendezvous, say) is named, not waited on."""
    name = f"tetrarch-nng-other-{os.getpid()}-{time.monotonic_ns()}"
    url, address = (("tcp://127.0.0.1:0", "") if kind == "tcp" else (f"abstract://{name}", f"nng+ipc://@{name}"))
    with pynng.Rep0() as other:
        listener = other.listen(url)
        if kind == "tcp":
            address = f"nng+tcp://{listener.local_address}"
        started = time.monotonic()
        with pytest.raises(TransportError, match="not a tetrarch nng listener"):
            transport.connect(address, Recorder(), timeout=scaled(10))
        assert time.monotonic() - started < scaled(5)


_LISTENING = """
import sys
from tetrarch.testing.transport import Recorder
from tetrarch_transport_nng._nng import NngTransport
transport = NngTransport()
srec = Recorder()
listener = transport.listen(transport.default_address(spans_hosts=False), srec)
conn = transport.connect(listener.address, Recorder(), timeout=10)  # nng's threads and pipes exist
conn.send([b"started"])
srec.wait_messages(srec.wait_opened(), 1)  # both sides read: their notification pipes exist
print(listener.address, flush=True)
sys.stdin.read()  # until the test is done
"""


def test_silent_strangers_hold_one_descriptor_each_and_no_nng_pipe() -> None:
    """Until nng opens a connection it has no notification pipe (two descriptors more per connection).

    Counted in a listening child that does nothing else meanwhile (this process's own count
    moves with what earlier tests left for the garbage collector and nng's reaper)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", _LISTENING], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=env)
    strangers: list[socket.socket] = []
    try:
        assert child.stdout is not None
        address = child.stdout.readline().decode().strip()
        assert address.startswith("nng+ipc://@"), address
        sockaddr = "\0" + address[len("nng+ipc://@"):]
        before = len(os.listdir(f"/proc/{child.pid}/fd"))
        for _ in range(20):
            s = socket.socket(socket.AF_UNIX)
            strangers.append(s)
            s.settimeout(scaled(10))
            s.connect(sockaddr)
            assert s.recv(8, socket.MSG_WAITALL) == PAIR0_HEADER  # handed to nng, which waits for ours
        held = len(os.listdir(f"/proc/{child.pid}/fd")) - before
        assert held == len(strangers), f"{len(strangers)} silent strangers hold {held} descriptors of the listener"
    finally:
        for s in strangers:
            s.close()
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()  # the child exits (closing its transport at exit)
        child.stdout.close()
        try:
            child.wait(scaled(10))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(scaled(10))


_EXITING = """
import socket, sys, threading, time
from tetrarch.plugins import TransportError
from tetrarch.testing.transport import Recorder
from tetrarch_transport_nng import _exit, _nng

silent = socket.socket(socket.AF_UNIX)  # takes connections into its backlog, never answers
silent.bind("\\0tetrarch-test-silent-" + sys.argv[1])
silent.listen(8)
transport = _nng.NngTransport()
errors = []

def dial():
    try:
        transport.connect("nng+ipc://@tetrarch-test-silent-" + sys.argv[1], Recorder(), timeout=60)
    except TransportError as exc:
        errors.append(str(exc))

dialer = threading.Thread(target=dial)
dialer.start()
silent.settimeout(30)
silent.accept()  # the dialer's connection: it now waits for nng's header, which never comes
started = time.monotonic()
_exit._close_at_exit()  # what exit runs before pynng's nng_fini
dialer.join(30)
print("blocked dial returned after %.1f s: %s" % (time.monotonic() - started, errors))
try:
    transport.connect("nng+ipc://@anything", Recorder(), timeout=5)
except TransportError as exc:
    print("later dial:", exc)
silent.close()
"""


def test_exit_stops_dials_before_nng_is_finalized() -> None:
    """A thread dialing while the process exits (a heartbeat whose connection closed) must not
    enter nng after ``nng_fini``: nng then dies of SIGFPE. A blocked dial returns at once; later ones raise."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", _EXITING, str(os.getpid())], capture_output=True, text=True,
                         env=env, timeout=scaled(60))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("blocked dial returned after"), out.stdout
    assert float(lines[0].split()[4]) < scaled(10), out.stdout
    assert "cannot connect" in lines[0], out.stdout
    assert "nng is shut down (this process is exiting)" in lines[1], out.stdout


def test_a_path_listener_takes_over_a_stale_socket_file_and_removes_its_own(
        transport: NngTransport, tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "nng.sock")
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(path)  # a socket file left behind: nobody listens on it
    srec = Recorder()
    listener = transport.listen(f"nng+ipc://{path}", srec)
    assert listener.address == f"nng+ipc://{path}"
    conn = transport.connect(listener.address, Recorder(), timeout=scaled(10))
    conn.send([b"over a path"])
    assert [[bytes(f) for f in m] for m in srec.wait_messages(srec.wait_opened(), 1)] == [[b"over a path"]]
    with pytest.raises(TransportError, match="cannot listen"):
        transport.listen(f"nng+ipc://{path}", Recorder())  # in use: not taken over
    conn.close()
    listener.close()
    closed = threading.Event()
    transport.loop().call(closed.set)  # after the listener's close ran on the I/O thread
    assert closed.wait(scaled(5))
    assert not os.path.exists(path)
