"""The owner decides who reaches its registered memory (issue 28, items 1, 2, 3 and 11).

* A peer that skips tetrarch's check and drives libfabric itself, knowing the owner's
  endpoint name (it is in every handle), reads and writes nothing over ``tcp;ofi_rxm``:
  the handle carries no key, keys are random 64-bit values handed out only to peers that
  authenticated with the allocation's secret, and the owner's provider checks each access
  against the key's registration.
* Over ``shm`` (whose libfabric 1.17 reader copies with ``process_vm_readv`` from any
  address, unchecked by anyone) buffers are refused unless the user opts in with
  ``efa_allow_unchecked_access``; the probe says so.
* A ``tcp;ofi_rxm`` endpoint listens on loopback unless the allocation spans hosts.
* Handles moved past their region, or out of 64 bits, fail at once and say what is wrong.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import psutil
import pytest

import tetrarch
from tetrarch import configured
from tetrarch.testing import scaled
from tetrarch.testing.rdma import digest, holders, pattern

pytestmark = pytest.mark.timeout(scaled(180))
SENTINEL = 0xEE


def _backend() -> Any:
    from tetrarch.testing.rdma import backend_instance

    return backend_instance("efa")


def _context(buf: Any) -> dict[str, Any]:
    from tetrarch.testing.rdma import descriptor_of

    ctx: dict[str, Any] = descriptor_of(buf).contexts["efa"]
    return ctx


def _raw(ep: Any, name: bytes, key: int, addr: int, local: bytearray, write: bool) -> BaseException | None:
    """One fi_read/fi_write through ``ep`` straight to the owner ``name``, with no question to the
    owner's tetrarch: what a peer that skips the check can do. The error, or None."""
    from tetrarch_rdma_efa._endpoint import Transfer

    address = int(ep.ffi.cast("uintptr_t", ep.ffi.from_buffer(local)))
    peer, gen = ep.peer(name)
    done: Future[BaseException | None] = Future()
    transfer = Transfer(write, deque([(address, len(local), addr)]), ep.ffi.NULL, peer, key,
                        time.monotonic() + scaled(10), done.set_result, lambda: None, gen)
    ep.submit(transfer)
    error = done.result(timeout=scaled(30))
    if error is not None:
        ep.forget(name, gen)  # tcp;ofi_rxm closes a connection on which a bad key was used
    return error


@pytest.mark.usefixtures("efa_provider")
class TestOwnerDecidesOverTcpRxm:
    provider = "tcp;ofi_rxm"

    @pytest.fixture(scope="class")
    @classmethod
    def owner(cls) -> Iterator[Any]:
        with holders("owner_decides") as mesh:
            yield mesh

    def test_a_peer_that_skips_the_owner_check_reads_and_writes_no_byte(self, owner: Any) -> None:
        nbytes = 4096
        buf = owner.make.call_one("guarded", nbytes, 11, "efa").get(timeout=scaled(60))
        ctx = _context(buf)
        ep = _backend().endpoint(self.provider)
        keys = ([ctx["key"]] if "key" in ctx else []) + list(range(33))  # the handle's, and guesses
        for key in keys:
            for addr in {0, ctx.get("addr", 0)}:
                local = bytearray([SENTINEL]) * nbytes
                error = _raw(ep, ctx["name"], key, addr, local, write=False)
                assert error is not None and local.count(SENTINEL) == nbytes, (
                    f"a peer that never asked the owner read its registered memory with key {key} at {addr}")
                error = _raw(ep, ctx["name"], key, addr, bytearray(nbytes), write=True)
                assert error is not None, f"a peer that never asked the owner wrote with key {key} at {addr}"
        assert owner.digest.call_one("guarded").get(timeout=scaled(30)) == digest(pattern(nbytes, 11))
        dst = bytearray(nbytes)
        buf.read_into(dst, timeout=scaled(30)).get(timeout=scaled(30))  # the owner still serves its allocation
        assert dst == pattern(nbytes, 11)

    def test_the_handle_carries_no_key_and_keys_are_random(self, owner: Any) -> None:
        bufs = [owner.make.call_one(f"k{i}", 64, i, "efa").get(timeout=scaled(60)) for i in range(4)]
        for buf in bufs:
            assert set(_context(buf)) == {"prov", "name"}, _context(buf)
        # a reader of the allocation got the keys from the owner: none counts up from a small number
        for buf in bufs:
            buf.read_into(bytearray(64), timeout=scaled(30)).get(timeout=scaled(30))
        mine = {(b._desc.owner.address, b._desc.buffer_id) for b in bufs}
        keys = [grant[1] for ident, grant in _backend()._confirmed.items() if ident[:2] in mine]
        assert len(keys) == 4 and all(k >= 1 << 32 for k in keys), keys

    def test_the_endpoint_listens_on_loopback_only(self, owner: Any) -> None:
        buf = owner.make.call_one("where", 64, 1, "efa").get(timeout=scaled(60))
        name = _context(buf)["name"]
        assert int.from_bytes(name[:2], "little") == 2, name  # sockaddr_in
        assert name[4] == 127, f"the owner's tcp;ofi_rxm endpoint is at {'.'.join(map(str, name[4:8]))}, not loopback"
        pid = owner.pid.call_one().get(timeout=scaled(30))
        listening = [c.laddr.ip for c in psutil.Process(pid).net_connections("inet") if c.status == psutil.CONN_LISTEN]
        assert listening and all(ip.startswith("127.") or ip == "::1" for ip in listening), listening
        here = _backend().endpoint(self.provider).name
        assert here[4] == 127, here

    def test_a_moved_or_overlong_address_fails_at_once_and_names_it(self, owner: Any) -> None:
        """Old-style contexts (key and address in the handle) and values outside 64 bits are
        malformed: refused before anything is posted, and the transfer thread goes on."""
        from tetrarch.plugins import BackendUnavailable
        from tetrarch.rdma import RDMABuffer, RDMAError
        from tetrarch.testing.rdma import descriptor_of

        buf = owner.make.call_one("moved", 4096, 12, "efa").get(timeout=scaled(60))
        desc = descriptor_of(buf)
        ctx = desc.contexts["efa"]
        for extra in ({"addr": 4096, "key": 1}, {"addr": 1 << 64, "key": 1}, {"name": b"\x02" * 4096}):
            fake = RDMABuffer._from_descriptor(desc._replace(contexts={"efa": {**ctx, **extra}}))
            start = time.monotonic()
            with pytest.raises((RDMAError, BackendUnavailable), match="malformed efa context") as caught:
                fake.read_into(bytearray(4096), timeout=scaled(30)).get(timeout=scaled(30))
            assert time.monotonic() - start < scaled(2)
            assert "path is at fault" not in str(caught.value)
        dst = bytearray(4096)
        buf.read_into(dst, timeout=scaled(30)).get(timeout=scaled(30))
        assert dst == pattern(4096, 12)


def test_the_bind_address_follows_the_allocation() -> None:
    """Loopback unless the process's own address is routable (its allocation spans hosts): then
    the interface of that address. Computed only: nothing is sent anywhere."""
    from tetrarch_rdma_efa._bind import bind_node

    assert bind_node("tcp;ofi_rxm", "ipc://@tetrarch-1-abc") == "127.0.0.1"
    assert bind_node("tcp;ofi_rxm", "tcp://127.0.0.1:4000") == "127.0.0.1"
    assert bind_node("tcp;ofi_rxm", "zmq+tcp://10.9.8.7:4000") == "10.9.8.7"
    assert bind_node("sockets", "tcp://192.0.2.5:1") == "192.0.2.5"
    assert bind_node("shm", "tcp://10.9.8.7:4000") is None  # shm takes no node
    assert bind_node("efa", "tcp://10.9.8.7:4000") is None  # the device's own address


def test_shm_refuses_owned_buffers_unless_the_user_gives_up_the_check() -> None:
    """libfabric 1.17's shm lets a reader copy any address of the owner (process_vm_readv) with no
    key or bounds check by anyone: the probe says so and registering needs the opt-in."""
    from tetrarch_rdma_efa._discover import discover
    from tetrarch_rdma_efa._plugin import probe

    if "shm" not in discover().rma:
        pytest.skip("libfabric offers no shm provider here")
    with configured(efa_provider="shm"):
        found = probe()
        assert "efa_allow_unchecked_access" in found.reason and "not checked" in found.reason, found.reason
        with holders("shm_refused") as mesh:
            with pytest.raises(tetrarch.ActorError, match="TETRARCH_EFA_ALLOW_UNCHECKED_ACCESS=1") as caught:
                mesh.make.call_one("x", 4096, 1, "efa").get(timeout=scaled(60))
            assert "not checked" in str(caught.value)
    with configured(efa_provider="shm", efa_allow_unchecked_access=True):
        assert "efa_allow_unchecked_access" in probe().reason
        with holders("shm_allowed") as mesh:
            buf = mesh.make.call_one("y", 4096, 2, "efa").get(timeout=scaled(60))
            dst = bytearray(4096)
            buf.read_into(dst, timeout=scaled(30)).get(timeout=scaled(30))
            assert dst == pattern(4096, 2)
