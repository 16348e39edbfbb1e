"""Cases run by ``test_efa_failures.py``, each class in a fresh pytest process (see there).

A dead or stopped owner must not stall the efa endpoint: later transfers to healthy owners
finish promptly, and the ended transfer's operations are reaped (issue 13, "Bad input").

Regression: a transfer whose owner was SIGKILLed or SIGSTOPped stayed at the head of the
endpoint's queue (its chunks answered ``-FI_EAGAIN`` on ``tcp;ofi_rxm``, whose connection
never came up) until its own deadline, and every later transfer of the process queued
behind it: the suite's last test timed out after the kill and timeout tests.
"""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

import tetrarch
from tetrarch import SupervisionError, this_host
from tetrarch.testing import scaled
from tetrarch.testing.rdma import Holder, backend_instance, descriptor_of, digest, holders, pattern

MiB = 1 << 20
pytestmark = pytest.mark.timeout(scaled(120))


def _backend() -> Any:
    return backend_instance("efa")


def _endpoint(provider: str) -> Any:
    return _backend().endpoint(provider)


@pytest.mark.usefixtures("efa_provider")
class _Failures:
    provider = ""

    @pytest.fixture(scope="class")
    @classmethod
    def healthy(cls) -> Iterator[Any]:
        with holders("healthy") as mesh:
            yield mesh

    def _victim(self) -> tuple[Any, Any, int]:
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        victim = procs.spawn("victim", Holder)
        buf = victim.make.call_one("victim", 64 * MiB, 3, "efa").get(timeout=scaled(60))
        return procs, buf, victim.pid.call_one().get(timeout=scaled(30))

    def _read_healthy(self, healthy: Any, seed: int) -> None:
        buf = healthy.make.call_one(f"h{seed}", MiB, seed, "efa").get(timeout=scaled(60))
        dst = bytearray(MiB)
        start = time.monotonic()
        buf.read_into(dst, timeout=scaled(10)).get(timeout=scaled(10))
        assert digest(dst) == digest(pattern(MiB, seed))
        assert time.monotonic() - start < scaled(5), "a healthy transfer waited behind a dead owner's"

    def test_a_killed_owner_blocks_no_later_transfer(self, healthy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(tetrarch, "unhandled_fault_hook", lambda failure: None)
        self._read_healthy(healthy, 1)  # connected and warm
        procs, buf, pid = self._victim()
        try:
            futs = [buf.read_into(bytearray(64 * MiB), timeout=scaled(60)) for _ in range(4)]
            os.kill(pid, signal.SIGKILL)
            for fut in futs:  # the owner's death is known promptly (not at the transfers' deadline)
                error = fut.exception(timeout=scaled(10))
                assert error is None or isinstance(error, SupervisionError), error
            # shm of libfabric 1.17 answers an endpoint's requests in order: the dead owner's stalls
            # every later one inside the provider, so the backend replaces that endpoint
            self._read_healthy(healthy, 2)
            # the dead owner's transfers leave the endpoint's queue (orphans may stay: see _endpoint)
            assert _endpoint(self.provider).wait_idle(scaled(10)), _endpoint(self.provider).pending()
            self._read_healthy(healthy, 3)
        finally:
            procs.stop().get(timeout=scaled(30))

    def test_a_stopped_owner_blocks_no_later_transfer(self, healthy: Any) -> None:
        procs, buf, pid = self._victim()
        try:
            os.kill(pid, signal.SIGSTOP)
            try:
                slow = [buf.read_into(bytearray(64 * MiB), timeout=scaled(2)) for _ in range(3)]
                self._read_healthy(healthy, 4)
                for fut in slow:
                    error = fut.exception(timeout=scaled(10))
                    assert error is None or isinstance(error, TimeoutError), error
                # timed out: reported and out of the window, not queued until some later event
                assert _endpoint(self.provider).wait_idle(scaled(10)), _endpoint(self.provider).pending()
                self._read_healthy(healthy, 5)
            finally:
                os.kill(pid, signal.SIGCONT)
        finally:
            procs.stop().get(timeout=scaled(30))
        self._read_healthy(healthy, 6)


    def test_a_transfer_resolved_before_its_owners_address_was_dropped_never_posts(self, healthy: Any) -> None:
        """Regression: a transfer that looked its owner's address up, then saw it removed by
        ``forget`` (an earlier transfer to that owner failed) before the progress thread posted
        it, was posted to the removed fi_addr: shm of libfabric 1.17 then took the spin lock of
        an unmapped peer region and the process died of SIGSEGV (hence a fresh process). It
        must fail with "try again", also once the address was inserted again (maybe under the
        same fi_addr), and the next transfer to that owner works."""
        from concurrent.futures import Future

        from tetrarch_rdma_efa._endpoint import EndpointError, Transfer

        buf = healthy.make.call_one("stale", MiB, 8, "efa").get(timeout=scaled(60))
        desc = descriptor_of(buf)
        ctx: dict[str, Any] = desc.contexts["efa"]
        # the key and address, granted by the owner as to any reader of the allocation
        _size, key, base = _backend().host.call(desc.owner.address, ("efa.check", desc.buffer_id, ctx["prov"], 0, MiB),
                                                scaled(30)).result(timeout=scaled(30))
        ep = _endpoint(self.provider)
        dst = bytearray(MiB)
        local = int(ep.ffi.cast("uintptr_t", ep.ffi.from_buffer(dst)))
        assert ep.wait_idle(scaled(10)), ep.pending()  # nothing in flight to it: forget removes the entry

        def stale(addr: int, gen: int) -> BaseException | None:
            ended: Future[BaseException | None] = Future()
            transfer = Transfer(False, deque([(local, MiB, base)]), ep.ffi.NULL, addr, key,
                                time.monotonic() + scaled(10), ended.set_result, lambda: None, gen)
            ep.submit(transfer)
            return ended.result(timeout=scaled(10))

        addr, gen = ep.peer(ctx["name"])
        posted = ep.completed
        ep.forget(ctx["name"])
        if self.provider == "shm":  # shm keeps its entries (see Endpoint.forget): drop it as forget does elsewhere
            with ep._lock:
                del ep._peers[ctx["name"]], ep._gens[addr]
                ep.lib.tf_av_remove(ep._t, addr)
        error = stale(addr, gen)  # its entry is gone
        assert isinstance(error, EndpointError) and "try again" in str(error), error
        again, new_gen = ep.peer(ctx["name"])
        assert new_gen != gen
        error = stale(addr, gen)  # an entry for the same owner again, perhaps under the same fi_addr
        assert isinstance(error, EndpointError) and "try again" in str(error), error
        assert ep.completed == posted, "a transfer to a dropped address reached the provider"
        assert ep.peer(ctx["name"]) == (again, new_gen)
        buf.read_into(dst, timeout=scaled(10)).get(timeout=scaled(10))
        assert digest(dst) == digest(pattern(MiB, 8))

    def test_a_closed_endpoint_refuses_control_calls(self) -> None:
        """A call that picked an endpoint just before the backend replaced and closed it fails
        with "try again" instead of reaching the freed libfabric objects."""
        from tetrarch_rdma_efa._build import load
        from tetrarch_rdma_efa._endpoint import Endpoint, EndpointError

        ep = Endpoint(load(), self.provider)
        name = _endpoint(self.provider).name
        ep.close()
        for call in (lambda: ep.peer(name), lambda: ep.register(0, 4096, 0, 1)):
            with pytest.raises(EndpointError, match=r"closed.*try again"):
                call()
        ep.forget(name)  # never raises
        assert ep.pending() == (0, 0)


class TestEfaShmFailures(_Failures):
    provider = "shm"


class TestEfaTcpRxmFailures(_Failures):
    provider = "tcp;ofi_rxm"


@pytest.mark.usefixtures("efa_provider")
class TestStuckShmEndpoint:
    provider = "shm"

    def test_a_stuck_endpoint_fails_its_calls_at_once_and_is_replaced(self) -> None:
        """libfabric 1.17's shm spins for good on a lock a killed process held (see ``_endpoint``):
        the process must not hang on that endpoint (not at exit either), and gets a fresh one.
        Holding the endpoint's lock here stands for its progress thread stuck inside the provider."""
        from tetrarch_rdma_efa._endpoint import WEDGED_S, EndpointError

        backend = _backend()
        stuck = backend.endpoint("shm")
        with stuck._lock:
            stuck._busy_since = time.monotonic() - WEDGED_S - 1
            assert stuck.wedged
            start = time.monotonic()
            with pytest.raises(EndpointError, match=r"stuck inside a provider call.*fresh endpoint"):
                stuck.register(0, 4096, 0, 1)
            fresh = backend.endpoint("shm")
            stuck.close()  # abandoned, not waited for
            assert time.monotonic() - start < scaled(2), "a call on a stuck endpoint waited for it"
        assert fresh is not stuck and not fresh.wedged
        with holders("after-stuck") as mesh:  # transfers go through the fresh endpoint
            buf = mesh.make.call_one("s", MiB, 7, "efa").get(timeout=scaled(60))
            dst = bytearray(MiB)
            buf.read_into(dst, timeout=scaled(10)).get(timeout=scaled(10))
            assert digest(dst) == digest(pattern(MiB, 7))
