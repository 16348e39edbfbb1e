"""The ``tcp`` RDMA backend: core's fallback, chunks streamed over the actor transport.

A read asks the owner's ``rdma`` service for a range (``tcp_read``); the owner checks it
against its registration table and streams it back as port messages of
``rdma_tcp_chunk_size`` bytes, each sent straight from the registered memory (no copy
on the sending side). The reader's port names the destination as the chunks' receive
sink, so on a transport with receive sinks (the builtin tcp and ipc) each chunk is read
from the socket straight into the destination at its offset; on any other transport it
arrives in a buffer of its own and is copied there. (So a chunk already arriving when a
read fails or times out may still land in the destination: as with hardware RDMA, its
contents are undefined after a failed read.) A write sends chunks (``tcp_write``), at most ``rdma_tcp_window`` of them
unacknowledged; the owner checks each against its table, copies it into place and
acknowledges it. Many chunks are in flight at once in both directions; TCP's own flow
control paces the stream.
"""

from __future__ import annotations

import struct
import threading
from concurrent.futures import Future
from typing import Any

from .._config import RDMA_TCP_CHUNK_SIZE, RDMA_TCP_WINDOW
from .._errors import RDMAError
from .._runtime.router._router import PeerUnreachable
from .._runtime.values import _serial, _wire
from ._backend import LocalRegion, RdmaBackend, RdmaHost, RemoteRegion, settle
from ._service import SERVICE, RdmaService

__all__ = ["TcpRdmaBackend"]

_READ = struct.Struct("!QQQQ")  # buffer id, offset, nbytes, chunk size
_WRITE = struct.Struct("!QQQ")  # buffer id, offset in the buffer, offset in the transfer


class TcpRdmaBackend(RdmaBackend):
    """Moves registered memory as chunked messages over the kernel's connections."""

    service: RdmaService

    def start(self, host: RdmaHost) -> None:
        super().start(host)
        self.service = host.service  # type: ignore[attr-defined]  # core's own host: the runtime behind it
        self.service.add_op("tcp_read", self._serve_read)
        self.service.add_op("tcp_write", self._serve_write)

    def register(self, region: LocalRegion, buffer_id: int) -> object:
        return None  # the owner's table is all a tcp transfer needs

    def deregister(self, buffer_id: int) -> None:
        pass

    # ------------------------------------------------------------ initiator side
    def _open(self, on_chunk: Any, sink: Any = None) -> tuple[Future[None], int]:
        fut: Future[None] = Future()
        router = self.service.router
        port = router.open_port(on_chunk, sink)
        fut.add_done_callback(lambda _f: router.close_port(port))
        return fut, port

    def _send(self, fut: Future[None], owner: str, frames: list) -> bool:
        error = self.service.send(owner, frames)
        if error is not None:
            settle(fut, error)
        return error is None

    def read(self, remote: RemoteRegion, offset: int, dst: LocalRegion, deadline: float) -> Future[None]:
        view = dst.view
        assert view is not None  # CPU memory only (memory_kinds)
        total = dst.nbytes
        got = [0]
        lock = threading.Lock()
        placed: dict[int, memoryview] = {}  # offset -> the destination slice a chunk is received into

        def sink(hdr: _wire.PortHeader, n: int) -> memoryview | None:
            start = hdr.tag
            if hdr.status != _wire.OK or not 0 <= start <= total - n:
                return None  # on_chunk reports it
            placed[start] = piece = view[start:start + n]
            return piece

        def on_chunk(hdr: _wire.PortHeader, frames: list) -> None:
            if hdr.status != _wire.OK:
                settle(fut, _error(frames))
                return
            data = frames[0]
            n = data.nbytes if isinstance(data, memoryview) else len(data)
            start = hdr.tag
            if not 0 <= start <= total - n:
                settle(fut, RDMAError(f"the owner sent {n} bytes at offset {start} of a {total}-byte read"))
                return
            if placed.pop(start, None) is not data:  # not received in place: copy it there
                view[start:start + n] = data
            with lock:
                got[0] += n
                done = got[0] == total
            if done:
                settle(fut)

        fut, port = self._open(on_chunk, sink)
        router = self.service.router
        meta = _READ.pack(remote.buffer_id, offset, total, RDMA_TCP_CHUNK_SIZE())
        self._send(fut, remote.owner.address, [_wire.sys_header(SERVICE, "tcp_read", router.address, port), meta])
        return fut

    def write(self, remote: RemoteRegion, offset: int, src: LocalRegion, deadline: float) -> Future[None]:
        view = src.view
        assert view is not None
        total = src.nbytes
        chunk = max(1, RDMA_TCP_CHUNK_SIZE())
        window = threading.Semaphore(max(1, RDMA_TCP_WINDOW()))
        acked = [0]
        lock = threading.Lock()

        def on_ack(hdr: _wire.PortHeader, frames: list) -> None:
            if hdr.status != _wire.OK:
                settle(fut, _error(frames))
                window.release()
                return
            with lock:
                acked[0] += min(chunk, total - hdr.tag)
                done = acked[0] == total
            window.release()
            if done:
                settle(fut)

        fut, port = self._open(on_ack)
        fut.add_done_callback(lambda _f: window.release(max(1, RDMA_TCP_WINDOW())))  # unblock the pump
        router = self.service.router
        owner = remote.owner.address

        def pump() -> None:
            header = _wire.sys_header(SERVICE, "tcp_write", router.address, port)
            for rel in range(0, total, chunk):
                window.acquire()
                if fut.done():
                    return
                meta = _WRITE.pack(remote.buffer_id, offset + rel, rel)
                if not self._send(fut, owner, [header, meta, view[rel:rel + chunk]]):
                    return

        self.service.pool.submit(pump)
        return fut

    # ------------------------------------------------------------ owner side (the rdma service)
    def _serve_read(self, hdr: _wire.SysHeader, frames: list) -> None:
        buffer_id, offset, nbytes, chunk = _READ.unpack(frames[0])
        region = self.host.lookup(buffer_id, offset, nbytes)  # raises RDMAError: the service replies it
        chunk = max(1, min(chunk, 64 << 20))
        router, addr, port = self.service.router, hdr.reply_addr, hdr.reply_port
        if addr is None or port is None:
            return

        def stream() -> None:
            view = region.view
            assert view is not None
            try:
                for rel in range(0, nbytes, chunk):
                    router.send(addr, [_wire.port_header(port, rel, _wire.OK), view[rel:rel + chunk]])
            except PeerUnreachable:
                pass  # the reader is gone

        self.service.pool.submit(stream)

    def _serve_write(self, hdr: _wire.SysHeader, frames: list) -> None:
        buffer_id, offset, rel = _WRITE.unpack(frames[0])
        data = frames[1]
        n = data.nbytes if isinstance(data, memoryview) else len(data)
        if self.service.readonly(buffer_id):
            raise RDMAError(f"RDMA buffer {buffer_id} is read-only at its owner; write_from needs writable memory")
        region = self.host.lookup(buffer_id, offset, n)
        assert region.view is not None
        region.view[:] = data
        self.service.router.reply_later(hdr.reply_addr, hdr.reply_port, rel, _wire.OK, None)


def _error(frames: list) -> BaseException:
    error = _serial.loads(frames)
    return error if isinstance(error, BaseException) else RDMAError(str(error))
