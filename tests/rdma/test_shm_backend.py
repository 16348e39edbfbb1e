"""The ``shm`` backend's own guarantees, below the frontend (RdmaSuite covers it through ``tetrarch.rdma``).

The owner and the initiator are this process (cross-memory attach to oneself is a real
``process_vm_*`` call); the host is a small registration table whose ``call`` runs the
owner's ``on_request`` on a thread, as the frontend does. What is checked: bytes land
where asked; a request for a dropped buffer, a malformed request or one from another pid
namespace is refused; a descriptor whose context is malformed, or whose owner is on
another host, in another namespace or of another user, is not reachable (the frontend
then picks another backend); ``deregister`` waits for a copy in flight; a request past its
deadline does not copy.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tetrarch._errors import RDMAError
from tetrarch._rdma import _shm
from tetrarch._rdma._backend import LocalRegion, PeerIdentity, RemoteRegion
from tetrarch._rdma._shm import ShmRdmaBackend, pid_namespace
from tetrarch._runtime.plumbing._cma import cma_probe
from tetrarch.testing import scaled

pytestmark = [
    pytest.mark.timeout(scaled(60)),
    pytest.mark.skipif(not cma_probe()[0], reason=f"cross-memory attach unavailable: {cma_probe()[1]}"),
]


def region_of(buf: bytearray) -> LocalRegion:
    view = memoryview(buf)
    return LocalRegion(ctypes.addressof(ctypes.c_char.from_buffer(buf)), len(buf), view)


class LoopbackHost:
    """A registration table and a ``call`` that reaches this process's backend on a worker thread."""

    def __init__(self) -> None:
        self.identity = PeerIdentity.here("loopback")
        self.table: dict[int, LocalRegion] = {}
        self.backend: ShmRdmaBackend | None = None
        self.pool = ThreadPoolExecutor(4)

    def lookup(self, buffer_id: int, offset: int, nbytes: int) -> LocalRegion:
        region = self.table.get(buffer_id)
        if region is None or offset + nbytes > region.nbytes:
            raise RDMAError(f"no buffer {buffer_id} or range outside it")
        assert region.view is not None
        return LocalRegion(region.address + offset, nbytes, region.view[offset:offset + nbytes])

    def call(self, owner: str, request: object, timeout: float) -> Future[object]:
        assert self.backend is not None
        return self.pool.submit(self.backend.on_request, "loopback", request)


@pytest.fixture
def host() -> Iterator[LoopbackHost]:
    h = LoopbackHost()
    b = ShmRdmaBackend()
    b.start(h)
    h.backend = b
    yield h
    h.pool.shutdown()
    b.close()


def registered(host: LoopbackHost, buffer_id: int, data: bytearray) -> RemoteRegion:
    assert host.backend is not None
    region = region_of(data)
    host.table[buffer_id] = region
    ctx = host.backend.register(region, buffer_id)
    return RemoteRegion(host.identity, buffer_id, len(data), ctx)


def later() -> float:
    return time.monotonic() + scaled(30)


def test_read_and_write_move_the_bytes_at_the_offset(host: LoopbackHost) -> None:
    assert host.backend is not None
    owned = bytearray(os.urandom((1 << 20) + 7))
    remote = registered(host, 1, owned)
    dst = bytearray(1000)
    host.backend.read(remote, 5, region_of(dst), later()).result(scaled(10))
    assert dst == owned[5:1005]
    src = bytearray(os.urandom(333))
    host.backend.write(remote, 1000, region_of(src), later()).result(scaled(10))
    assert owned[1000:1333] == src


def test_the_context_holds_no_address(host: LoopbackHost) -> None:
    """Nothing in the descriptor is an address the owner would trust: the owner's table decides."""
    remote = registered(host, 1, bytearray(64))
    assert remote.context == {"pidns": pid_namespace(), "uid": os.geteuid()}


def test_a_dropped_buffer_is_refused_even_if_the_table_still_has_it(host: LoopbackHost) -> None:
    assert host.backend is not None
    remote = registered(host, 7, bytearray(64))
    host.backend.deregister(7)
    host.backend.deregister(7)  # idempotent
    with pytest.raises(RDMAError, match="dropped"):
        host.backend.read(remote, 0, region_of(bytearray(8)), later()).result(scaled(10))


@pytest.mark.parametrize("request_", [
    None, ("shm.read",), ("shm.rm", 1, 0, 8, os.getpid(), 4096, pid_namespace(), 1e12),
    ("shm.read", 1, -1, 8, os.getpid(), 4096, pid_namespace(), 1e12),
    ("shm.read", 1, 0, 0, os.getpid(), 4096, pid_namespace(), 1e12),
    ("shm.read", 1, 0, 8, os.getpid(), 0, pid_namespace(), 1e12),
    ("shm.read", "1", 0, 8, os.getpid(), 4096, pid_namespace(), 1e12),
])
def test_malformed_requests_are_refused(host: LoopbackHost, request_: object) -> None:
    assert host.backend is not None
    registered(host, 1, bytearray(64))
    with pytest.raises(RDMAError, match="malformed"):
        host.backend.on_request("peer", request_)


def test_requests_from_another_pid_namespace_are_refused(host: LoopbackHost) -> None:
    assert host.backend is not None
    registered(host, 1, bytearray(64))
    dst = region_of(bytearray(8))
    with pytest.raises(RDMAError, match="another pid namespace"):
        host.backend.on_request("peer", ("shm.read", 1, 0, 8, os.getpid(), dst.address, "0:1", 1e12))


def test_out_of_range_requests_are_refused_by_the_owner(host: LoopbackHost) -> None:
    """A forged size in a descriptor does not widen the region: the owner's table bounds it."""
    assert host.backend is not None
    remote = registered(host, 1, bytearray(64))
    forged = RemoteRegion(remote.owner, 1, 1 << 30, remote.context)
    with pytest.raises(RDMAError, match="outside"):
        host.backend.read(forged, 60, region_of(bytearray(8)), later()).result(scaled(10))


@pytest.mark.parametrize(("ctx", "reason"), [
    (None, "malformed"), ({"pidns": 3, "uid": 0}, "malformed"),
    ({"pidns": "0:1", "uid": os.geteuid()}, "another pid namespace"),
    ({"pidns": pid_namespace(), "uid": os.geteuid() + 1}, "uid"),
])
def test_unreachable_owners_are_reported_not_used(host: LoopbackHost, ctx: object, reason: str) -> None:
    assert host.backend is not None
    why = host.backend.can_reach(RemoteRegion(host.identity, 1, 8, ctx))
    assert why is not None and reason in why


def test_an_owner_on_another_host_is_not_reachable(host: LoopbackHost) -> None:
    assert host.backend is not None
    me = host.identity
    elsewhere = PeerIdentity(me.address, me.pid, me.hostname, "another-boot-id")
    remote = RemoteRegion(elsewhere, 1, 8, {"pidns": pid_namespace(), "uid": os.geteuid()})
    assert host.backend.can_reach(remote) == "the owner runs on another host"
    assert host.backend.can_reach(RemoteRegion(me, 1, 8, remote.context)) is None


def test_deregister_waits_for_a_copy_in_flight(host: LoopbackHost, monkeypatch: pytest.MonkeyPatch) -> None:
    assert host.backend is not None
    copying, release = threading.Event(), threading.Event()
    real = _shm.vm_write

    def held(pid: int, address: int, local: object) -> None:
        copying.set()
        release.wait(scaled(10))
        real(pid, address, local)

    monkeypatch.setattr(_shm, "vm_write", held)
    owned = bytearray(b"x" * 64)
    remote = registered(host, 1, owned)
    dst = bytearray(64)
    fut = host.backend.read(remote, 0, region_of(dst), later())
    assert copying.wait(scaled(10))
    dropped = threading.Event()
    backend = host.backend

    def drop() -> None:
        backend.deregister(1)
        dropped.set()

    t = threading.Thread(target=drop)
    t.start()
    assert not dropped.wait(0.2)  # a bounded check that it is still waiting, not a synchronization
    release.set()
    fut.result(scaled(10))
    t.join(scaled(10))
    assert dropped.is_set() and dst == owned


def test_a_request_past_its_deadline_does_not_copy(host: LoopbackHost) -> None:
    assert host.backend is not None
    remote = registered(host, 1, bytearray(b"y" * 64))
    dst = bytearray(64)
    with pytest.raises(RDMAError, match="deadline"):
        host.backend.read(remote, 0, region_of(dst), time.monotonic() - 1).result(scaled(10))
    assert dst == bytearray(64)
