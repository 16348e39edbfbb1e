"""Raw library baselines for the benchmarks: the same workloads with no tetrarch in between.

One peer per child process (:data:`PEER` is its program) serves one connection with
the library itself: a plain socket (``socket``, length-prefixed messages over ``ipc``
= ``AF_UNIX`` or ``tcp`` loopback), pyzmq (``zmq``: ROUTER peer, DEALER here) or pynng
(``nng``: ``Pair0`` on both ends; ``Req0``/``Rep0`` cannot pipeline). A message of at
most 64 bytes comes back as it is (a call); a larger one is answered with one byte
(an argument delivered): the peer reads it into a buffer it reuses. Nothing here
imports tetrarch or a transport plugin.

:class:`Peer` drives one peer: ``roundtrip()`` (one call), ``pipelined(n, window)``
(``n`` calls with up to ``window`` in flight: a socket peer that writes while we write
would deadlock once both kernel buffers are full; the zmq sockets have no high-water
marks and the peer's ROUTER raises rather than drop a reply), ``payload(data)`` (send ``data``, wait for the ack).
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
from typing import Any

__all__ = ["LIBRARIES", "PEER", "Peer", "library_of", "missing_library"]

#: The library each transport's baseline uses (a third-party transport gets the raw socket).
LIBRARIES = {"ipc": "socket", "tcp": "socket", "zmq": "zmq", "nng": "nng"}
SMALL = 64  # bytes: at most this comes back as it is
#: Seconds the zmq and nng baselines wait for one reply before the run fails (a socket peer
#: that dies closes the connection instead).
RECV_TIMEOUT = 60.0

PEER = r"""
import os, socket, struct, sys
lib, scheme, name = sys.argv[1:4]
SMALL = 64
if lib == "socket":
    if scheme == "ipc":
        s = socket.socket(socket.AF_UNIX); s.bind("\0" + name); where = "ipc://@" + name
    else:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); where = "tcp://127.0.0.1:%d" % s.getsockname()[1]
    s.listen(1); print(where, flush=True)
    c, _ = s.accept()
    if scheme == "tcp":
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf, big = bytearray(), bytearray()
    while True:
        d = c.recv(1 << 18)
        if not d:
            break
        buf += d
        out = []
        while len(buf) >= 4:
            (n,) = struct.unpack_from("!I", buf)
            if n > SMALL:  # a payload: the rest straight into the reused buffer (the sender waits for the ack)
                if len(big) < n:
                    big = bytearray(n)
                view = memoryview(big)[:n]
                got = min(n, len(buf) - 4)
                view[:got] = buf[4:4 + got]
                del buf[:]
                while got < n:
                    got += c.recv_into(view[got:])
                view.release()
                out.append(struct.pack("!I", 1) + b"k")
                break
            if len(buf) < 4 + n:
                break
            out.append(bytes(buf[:4 + n])); del buf[:4 + n]
        if out:
            c.sendall(b"".join(out))
elif lib == "zmq":
    import zmq
    ctx = zmq.Context(); s = ctx.socket(zmq.ROUTER)
    # No high-water marks (the client's window bounds what is queued), and a reply that
    # cannot go out raises: with SNDHWM at its default of 1000, a ROUTER dropped a reply of a
    # 1000-call window now and then (libzmq acknowledges reads in batches), and the client
    # waited for it for good.
    s.setsockopt(zmq.SNDHWM, 0); s.setsockopt(zmq.RCVHWM, 0); s.setsockopt(zmq.ROUTER_MANDATORY, 1)
    addr = ("ipc://@" + name) if scheme == "ipc" else "tcp://127.0.0.1:0"
    s.bind(addr); print(s.getsockopt_string(zmq.LAST_ENDPOINT) if scheme == "tcp" else addr, flush=True)
    while True:
        ident, msg = s.recv_multipart(copy=False)
        if msg.bytes == b"quit":
            break
        s.send_multipart([ident, msg if len(msg) <= SMALL else b"k"], copy=False)
else:
    import pynng
    addr = ("ipc://" + "/tmp/" + name) if scheme == "ipc" else "tcp://127.0.0.1:%d" % int(sys.argv[4])
    s = pynng.Pair0(recv_max_size=0, recv_buffer_size=8192, send_buffer_size=8192)
    s.listen(addr); print(addr, flush=True)
    while True:
        msg = s.recv_msg()
        if msg.bytes == b"quit":
            break
        s.send(msg.bytes if len(msg.bytes) <= SMALL else b"k")
"""


def library_of(transport: str) -> str:
    """The raw library whose baseline goes next to ``transport``."""
    return LIBRARIES.get(transport, "socket")


def missing_library(lib: str) -> str:
    """Why ``lib``'s baseline cannot run here (its Python package is missing), or ``""``."""
    module = {"zmq": "zmq", "nng": "pynng"}.get(lib)
    if module is None:
        return ""
    try:
        __import__(module)
    except ImportError as exc:
        return f"{module} is not importable ({exc}); pip install {'pyzmq' if lib == 'zmq' else 'pynng'}"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Peer:
    """A baseline peer in a child process and our end of its one connection."""

    _count = 0

    def __init__(self, lib: str, scheme: str) -> None:
        Peer._count += 1
        self.lib = lib
        name = f"tetrarch-bench-{os.getpid()}-{Peer._count}"
        argv = [sys.executable, "-c", PEER, lib, scheme, name, str(_free_port())]
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        self.address = self._proc.stdout.readline().strip()
        if not self.address:
            raise RuntimeError(f"the {lib} baseline peer did not start (exit {self._proc.wait(10)})")
        self._sock: Any
        if lib == "socket":
            if scheme == "ipc":
                self._sock = socket.socket(socket.AF_UNIX)
                self._sock.connect("\0" + name)
            else:
                host, port = self.address[len("tcp://"):].rsplit(":", 1)
                self._sock = socket.create_connection((host, int(port)))
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        elif lib == "zmq":
            import zmq

            self._ctx = zmq.Context()
            self._sock = self._ctx.socket(zmq.DEALER)
            self._sock.setsockopt(zmq.SNDHWM, 0)
            self._sock.setsockopt(zmq.RCVHWM, 0)
            self._sock.setsockopt(zmq.RCVTIMEO, int(RECV_TIMEOUT * 1000))  # a lost reply fails the run
            self._sock.connect(self.address)
            self._timed_out: type[Exception] = zmq.Again
        else:
            import pynng

            self._sock = pynng.Pair0(recv_max_size=0, recv_buffer_size=8192, send_buffer_size=8192,
                                     recv_timeout=int(RECV_TIMEOUT * 1000))
            self._sock.dial(self.address, block=True)
            self._timed_out = pynng.Timeout

    # -- one message each way ------------------------------------------------
    def send(self, data: Any) -> None:
        if self.lib == "socket":
            n = memoryview(data).nbytes
            if n <= SMALL:  # one write, as a small message's header and body go together
                self._sock.sendall(struct.pack("!I", n) + bytes(data))
            else:
                self._sock.sendall(struct.pack("!I", n))
                self._sock.sendall(data)
        elif self.lib == "zmq":
            self._sock.send(data, copy=False)
        else:  # pynng's send takes bytes or a cffi buffer: wrap, do not copy
            from pynng.nng import ffi

            self._sock.send(data if isinstance(data, bytes) else ffi.from_buffer(memoryview(data)))

    def recv(self) -> None:
        """One reply.

        Raises:
            ConnectionError: the peer closed the connection, or no reply came within
                :data:`RECV_TIMEOUT` (zmq, nng).
        """
        if self.lib == "socket":
            (n,) = struct.unpack("!I", self._recv_exact(4))
            self._recv_exact(n)
            return
        try:
            if self.lib == "zmq":
                self._sock.recv(copy=False)
            else:
                self._sock.recv_msg()
        except self._timed_out as exc:
            raise ConnectionError(f"no reply from the raw {self.lib} peer within {RECV_TIMEOUT:.0f} s") from exc

    def _recv_exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self._sock.recv(n - got)
            if not chunk:
                raise ConnectionError("the baseline peer closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    # -- workloads -------------------------------------------------------------
    def roundtrip(self, msg: bytes = b"x" * 8) -> None:
        self.send(msg)
        self.recv()

    def pipelined(self, n: int, window: int, msg: bytes = b"x" * 8) -> None:
        """``n`` calls, at most ``window`` unanswered at any time."""
        sent = done = 0
        while done < n:
            while sent < n and sent - done < window:
                self.send(msg)
                sent += 1
            self.recv()
            done += 1

    def payload(self, data: Any) -> None:
        self.send(data)
        self.recv()

    def close(self) -> None:
        if self.lib == "socket":
            self._sock.close()
        else:
            self.send(b"quit")
            self._sock.close()
            if self.lib == "zmq":
                self._ctx.term()
        self._proc.wait(30)
        if self.lib == "nng" and self.address.startswith("ipc:///"):
            try:
                os.unlink(self.address[len("ipc://"):])
            except FileNotFoundError:
                pass
