"""``RdmaSuite``: the contract every RDMA backend passes (core's ``tcp`` and ``shm``, and plugins').

Subclass it and provide the ``backend`` fixture (the backend's name)::

    import pytest
    from tetrarch.testing.rdma import RdmaSuite

    class TestFooRdma(RdmaSuite):
        @pytest.fixture(scope="class")
        def backend(self) -> str:
            return "foo"

Every test registers its buffers in an owner proc with ``RDMABuffer(data, backend=...)``,
so the transfers run through that backend only, and reads them from the client (and
from a third process). Owners are actors (:class:`tetrarch.testing._rdma_actors.Holder`)
in a two-proc mesh made once per class; the SIGKILL and SIGSTOP tests make their own.

Switches a subclass may override (fixtures, like fsspec's abstract suites):

``stalls_when_owner_stopped`` (default True)
    a transfer from a SIGSTOPped owner cannot finish (its owner serves it, as ``tcp``
    does); set False for a backend that reads the owner's memory without its help (the
    timeout test then only checks the transfer ends, either way, in time).

The suite needs ``pytest``, ``psutil`` (``tetrarch[test]``) and, for the dtype and view tests,
torch and numpy (a test whose library is missing is skipped).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import tetrarch
from tetrarch import SupervisionError, this_host
from tetrarch.testing import scaled
from tetrarch.testing._rdma_actors import SENTINEL, VIEW_IDIOMS, Holder, digest, pattern

__all__ = ["Holder", "RdmaSuite", "backend_instance", "close_backends", "descriptor_of",
           "digest", "holders", "outside_the_region", "pattern",
           "run_outsider"]

MiB = 1 << 20


@contextmanager
def holders(name: str, procs: int = 1) -> Iterator[Any]:
    """A mesh of :class:`Holder` actors (buffer owners), one per each of ``procs`` fresh procs of
    this host; the procs are stopped when the block ends."""
    mesh = this_host().spawn_procs(per_host={"gpus": procs})
    try:
        yield mesh.spawn(name, Holder)
    finally:
        mesh.stop().get(timeout=scaled(30))



def descriptor_of(buf: Any) -> Any:
    """The wire descriptor of an ``RDMABuffer`` (what a reader receives): for tests that forge one."""
    from tetrarch._rdma._buffer import Descriptor

    return Descriptor(*buf.__reduce__()[1][0])


def backend_instance(name: str) -> Any:
    """This process's started RDMA backend ``name`` (started on first use)."""
    from tetrarch._rdma._service import rdma_service

    return rdma_service().backend(name)

class RdmaSuite:
    """The RDMA backend contract (see the module docstring)."""

    pytestmark = pytest.mark.timeout(scaled(120))

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> str:
        raise NotImplementedError("subclasses of RdmaSuite provide a class-scoped `backend` fixture (its name)")

    @pytest.fixture(scope="class")
    @classmethod
    def stalls_when_owner_stopped(cls) -> bool:
        return True

    @pytest.fixture(scope="class")
    @classmethod
    def holders(cls) -> Iterator[Any]:
        with holders("rdma_holders", 2) as mesh:
            yield mesh

    @pytest.fixture(scope="class")
    @classmethod
    def owner(cls, holders: Any) -> Any:
        return holders.slice(gpus=0)

    @pytest.fixture(scope="class")
    @classmethod
    def third(cls, holders: Any) -> Any:
        return holders.slice(gpus=1)

    @staticmethod
    def _make(owner: Any, backend: str, nbytes: int, seed: int = 1, key: str | None = None) -> Any:
        return owner.make.call_one(key or f"b{nbytes}-{seed}", nbytes, seed, backend).get(timeout=scaled(60))

    # ------------------------------------------------------------ round trips
    @pytest.mark.parametrize("nbytes", [1, 3, 4097, MiB + 1, 64 * MiB + 7, 256 * MiB],
                             ids=["1B", "3B", "4097B", "1MiB+1", "64MiB+7", "256MiB"])
    def test_round_trip(self, owner: Any, backend: str, nbytes: int) -> None:
        """read_into gets the owner's bytes; write_from puts ours there; the handle names the backend."""
        buf = self._make(owner, backend, nbytes, key=f"rt{nbytes}")
        assert buf.size() == nbytes
        assert buf.backend == backend
        dst = bytearray(nbytes)
        buf.read_into(dst, timeout=scaled(60)).get(timeout=scaled(60))
        assert digest(dst) == digest(pattern(nbytes, 1))
        src = pattern(nbytes, 2)
        buf.write_from(src, timeout=scaled(60)).get(timeout=scaled(60))
        assert owner.digest.call_one(f"rt{nbytes}").get() == digest(src)
        buf.drop().get(timeout=scaled(10))
        owner.forget.call_one(f"rt{nbytes}").get()

    def test_read_into_a_larger_destination_fills_its_leading_bytes(self, owner: Any, backend: str) -> None:
        buf = self._make(owner, backend, 1000)
        dst = bytearray(b"\xff" * 1500)
        buf.read_into(dst).get(timeout=scaled(30))
        assert dst[:1000] == pattern(1000, 1)
        assert dst[1000:] == b"\xff" * 500

    def test_a_third_process_reads_a_buffer_it_was_passed(self, owner: Any, third: Any, backend: str) -> None:
        buf = self._make(owner, backend, 3 * MiB + 5)
        assert third.read_from.call_one(buf).get(timeout=scaled(60)) == digest(pattern(3 * MiB + 5, 1))

    def test_every_dtype_through_a_uint8_view(self, owner: Any, backend: str) -> None:
        torch = pytest.importorskip("torch")
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
                      torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64):
            n = 1001
            raw = pattern(n * torch.tensor([], dtype=dtype).element_size(), 3)
            buf = self._make(owner, backend, len(raw), seed=3, key=f"dtype-{dtype}")
            dst = torch.empty(n, dtype=dtype)
            buf.read_into(dst.view(torch.uint8).flatten()).get(timeout=scaled(30))
            assert bytes(dst.view(torch.uint8).numpy()) == bytes(raw), dtype
            buf.drop().get(timeout=scaled(10))

    @pytest.mark.parametrize("idiom", list(VIEW_IDIOMS))
    def test_a_buffer_over_a_dropped_byte_view_lives_as_long_as_the_memory(self, owner: Any, third: Any,
                                                                            backend: str, idiom: str) -> None:
        """Monarch's idiom, ``RDMABuffer(t.view(torch.uint8).flatten())``: the owner keeps ``t`` and
        drops the view at once. The buffer works for as long as ``t`` lives (a third process reads
        it, the client writes it), and once the owner frees ``t`` it is released: a read fails
        with the reason, at once, and the owner's registration table no longer has it."""
        from tetrarch.rdma import RDMAError

        for lib in ("torch", "numpy") if "torch" in idiom else ("numpy",):
            pytest.importorskip(lib)
        nbytes, key = 4096 + 12, f"view-{idiom}"
        buf = owner.make_view.call_one(key, nbytes, 9, backend, idiom).get(timeout=scaled(60))
        assert buf.backend == backend
        assert third.read_from.call_one(buf).get(timeout=scaled(30)) == digest(pattern(nbytes, 9)), VIEW_IDIOMS[idiom]
        dst = bytearray(nbytes)
        buf.read_into(dst, timeout=scaled(30)).get(timeout=scaled(30))
        assert dst == pattern(nbytes, 9), VIEW_IDIOMS[idiom]
        src = pattern(nbytes, 10)
        buf.write_from(src, timeout=scaled(30)).get(timeout=scaled(30))
        assert owner.digest.call_one(key).get() == digest(src)
        registered = owner.registrations.call_one().get(timeout=scaled(30))
        owner.forget.call_one(key).get(timeout=scaled(30))  # the owner frees the memory
        assert len(owner.registrations.call_one().get(timeout=scaled(30))) == len(registered) - 1, (
            "freeing the memory must release its registration")
        start = time.monotonic()
        with pytest.raises(RDMAError, match="its memory was freed"):
            buf.read_into(dst, timeout=scaled(30)).get(timeout=scaled(30))
        assert time.monotonic() - start < scaled(5)

    # ------------------------------------------------------------ bad input
    def test_sizes_that_do_not_fit_raise_value_error(self, owner: Any, backend: str) -> None:
        buf = self._make(owner, backend, 100)
        with pytest.raises(ValueError, match="dst has 99 bytes but the buffer holds 100"):
            buf.read_into(bytearray(99))
        with pytest.raises(ValueError, match="src has 101 bytes but the buffer holds only 100"):
            buf.write_from(bytearray(101))

    def test_unusable_memory_is_refused_with_the_fix(self) -> None:
        from tetrarch.rdma import RDMABuffer

        with pytest.raises(ValueError, match="empty"):
            RDMABuffer(bytearray())
        torch = pytest.importorskip("torch")
        with pytest.raises(ValueError, match=r"1-D.*t\.view\(torch\.uint8\)\.flatten\(\)"):
            RDMABuffer(torch.zeros(4, 4))
        with pytest.raises(ValueError, match="not contiguous"):
            RDMABuffer(torch.zeros(8)[::2])
        with pytest.raises(TypeError, match="read-only"):
            RDMABuffer(memoryview(b"abc"))
        with pytest.raises(TypeError, match="must be a torch tensor"):
            RDMABuffer([1, 2, 3])

    def test_a_dropped_buffer_cannot_be_read(self, owner: Any, third: Any, backend: str) -> None:
        from tetrarch.rdma import RDMAError

        buf = self._make(owner, backend, 4096, key="dropped")
        held = third.read_from.call_one(buf).get(timeout=scaled(30))  # a holder elsewhere reads it while alive
        assert held == digest(pattern(4096, 1))
        buf.drop().get(timeout=scaled(10))
        with pytest.raises(RDMAError, match="dropped"):
            buf.read_into(bytearray(4096))
        with pytest.raises(tetrarch.ActorError, match="dropped"):  # the other holder's copy of the handle
            third.read_from.call_one(buf).get(timeout=scaled(30))

    def test_a_forged_handle_cannot_reach_outside_the_region(self, owner: Any, backend: str) -> None:
        from tetrarch.rdma import RDMABuffer, RDMAError

        buf = self._make(owner, backend, 4096, key="forged")
        desc = descriptor_of(buf)
        for forged in (desc._replace(size=8192), desc._replace(buffer_id=desc.buffer_id + 10_000)):
            fake = RDMABuffer._from_descriptor(forged)
            with pytest.raises(RDMAError):
                fake.read_into(bytearray(forged.size)).get(timeout=scaled(30))
            with pytest.raises(RDMAError):
                fake.write_from(bytearray(forged.size)).get(timeout=scaled(30))
        assert owner.digest.call_one("forged").get() == digest(pattern(4096, 1))

    # ------------------------------------------------------------ enforced by the owner
    def test_a_reader_outside_the_allocation_gets_a_clear_error_and_no_byte(self, owner: Any, backend: str) -> None:
        """A process of another allocation (its own secret) holding a real handle reads and writes
        nothing: the owner refuses it, and the error says so (not a timeout, not a death)."""
        nbytes = 64 * 1024
        buf = self._make(owner, backend, nbytes, seed=7, key="outsider")
        for attempt in run_outsider(buf):
            assert attempt["error"] is not None, f"a process of another allocation moved bytes: {attempt}"
            assert "not of the buffer's allocation" in attempt["error"], attempt
            assert attempt["untouched"], f"bytes of the owner reached another allocation: {attempt}"
            assert attempt["seconds"] < scaled(10), attempt
        assert owner.digest.call_one("outsider").get() == digest(pattern(nbytes, 7))

    def test_a_descriptor_outside_the_region_is_refused_at_once_with_no_byte(self, owner: Any, backend: str) -> None:
        """A handle whose size or context was moved past the registration (or out of 64 bits)
        fails at once with an error, and neither a byte from outside the region reaches the
        reader nor a byte of the writer reaches the owner."""
        from tetrarch.rdma import RDMABuffer

        buf = self._make(owner, backend, 4096, seed=8, key="outside")
        desc = descriptor_of(buf)
        for forged in outside_the_region(desc, backend):
            fake = RDMABuffer._from_descriptor(forged)
            for write in (False, True):
                local = bytearray([SENTINEL]) * forged.size
                start = time.monotonic()
                with pytest.raises(Exception) as caught:  # noqa: PT011 - which error depends on the backend
                    _transfer(fake, local, write)
                assert not isinstance(caught.value, TimeoutError), (forged, caught.value)
                assert str(caught.value), forged
                assert time.monotonic() - start < scaled(5), (forged, caught.value)
                assert local.count(SENTINEL) == len(local), f"bytes from outside the region were read: {forged}"
        assert owner.digest.call_one("outside").get() == digest(pattern(4096, 8))
        dst = bytearray(4096)
        buf.read_into(dst, timeout=scaled(30)).get(timeout=scaled(30))  # the real handle still works
        assert dst == pattern(4096, 8)

    # ------------------------------------------------------------ concurrency and batches
    def test_many_concurrent_transfers_on_one_buffer_and_across_buffers(self, owner: Any, backend: str) -> None:
        one = self._make(owner, backend, 2 * MiB + 3, key="conc-one")
        dsts = [bytearray(2 * MiB + 3) for _ in range(16)]
        futs = [one.read_into(d) for d in dsts]
        bufs = [self._make(owner, backend, 65536 + i, seed=i, key=f"conc-{i}") for i in range(8)]
        dsts2 = [bytearray(65536 + i) for i in range(8)]
        futs += [b.read_into(d) for b, d in zip(bufs, dsts2, strict=True)]
        for fut in futs:
            fut.get(timeout=scaled(60))
        assert all(digest(d) == digest(pattern(2 * MiB + 3, 1)) for d in dsts)
        assert all(d == pattern(65536 + i, i) for i, d in enumerate(dsts2))

    def test_rdma_action_mixes_reads_and_writes(self, owner: Any, backend: str) -> None:
        from tetrarch.rdma import RDMAAction

        a = self._make(owner, backend, MiB, seed=4, key="act-a")
        b = self._make(owner, backend, 3000, seed=5, key="act-b")
        got = bytearray(MiB)
        new = pattern(3000, 6)
        action = RDMAAction().read_remote(got, a).write_remote(b, new)
        action.submit(timeout=scaled(30)).get(timeout=scaled(30))
        assert got == pattern(MiB, 4)
        assert owner.digest.call_one("act-b").get() == digest(new)
        with pytest.raises(ValueError, match="overlaps"):
            RDMAAction().read_remote(memoryview(got)[:3000], b).read_remote(memoryview(got)[2999:6000], b)
        action.submit(timeout=scaled(30)).get(timeout=scaled(30))  # again

    # ------------------------------------------------------------ failures
    def test_owner_killed_during_a_transfer_gives_supervision_error(self, backend: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(tetrarch, "unhandled_fault_hook", lambda failure: None)
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        try:
            victim = procs.spawn("victim", Holder)
            buf = self._make(victim, backend, 256 * MiB, key="victim")
            pid = victim.pid.call_one().get()
            dst = bytearray(256 * MiB)
            for _ in range(3):  # kill during the transfer; a backend that finished first gets another go
                fut = buf.read_into(dst, timeout=scaled(60))
                os.kill(pid, signal.SIGKILL)
                start = time.monotonic()
                try:
                    fut.get(timeout=scaled(10))
                except SupervisionError:
                    assert time.monotonic() - start < scaled(2)
                    return
                if not _alive(pid):
                    break
            with pytest.raises(SupervisionError):  # killed after the transfer: the next one fails
                buf.read_into(dst, timeout=scaled(60)).get(timeout=scaled(10))
        finally:
            procs.stop().get(timeout=scaled(30))

    def test_a_timeout_fires_on_time(self, backend: str, stalls_when_owner_stopped: bool) -> None:
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        try:
            frozen = procs.spawn("frozen", Holder)
            buf = self._make(frozen, backend, 64 * MiB, key="frozen")
            pid = frozen.pid.call_one().get()
            os.kill(pid, signal.SIGSTOP)
            try:
                start = time.monotonic()
                fut = buf.read_into(bytearray(64 * MiB), timeout=0.5)
                error = fut.exception(timeout=scaled(5))
                if error is None:
                    assert not stalls_when_owner_stopped, "a read from a stopped owner cannot have finished"
                else:
                    assert isinstance(error, TimeoutError), error
                    assert "timed out" in str(error)
                assert time.monotonic() - start < 0.5 + scaled(1)
            finally:
                os.kill(pid, signal.SIGCONT)
        finally:
            procs.stop().get(timeout=scaled(30))

    def test_bad_timeouts_are_refused(self, owner: Any, backend: str) -> None:
        buf = self._make(owner, backend, 10)
        for bad in (0, -1, float("inf"), "5"):
            with pytest.raises(ValueError, match="timeout"):
                buf.read_into(bytearray(10), timeout=bad)


def close_backends(*names: str) -> None:
    """Close the RDMA backends ``names`` this process started (at the end of a test session: what
    they hold, e.g. the efa backend's ``shm`` endpoints and the janitor watching them, goes now,
    not at the interpreter's exit). Never raises."""
    from tetrarch._rdma._service import rdma_service

    for name in names:
        backend = rdma_service()._backends.get(name)
        if backend is not None:
            backend.close()


def run_outsider(buf: Any, timeout: float | None = None) -> list[dict[str, Any]]:
    """Hand ``buf`` to a fresh tetrarch client of another allocation (``python -m
    tetrarch.testing._rdma_actors``, this process's settings in its environment) that reads it
    and writes to it; what each attempt gave (see ``_rdma_actors.outsider``)."""
    from tetrarch._config import config_env

    timeout = timeout or scaled(10)
    proc = subprocess.run([sys.executable, "-m", "tetrarch.testing._rdma_actors", str(timeout)],
                          input=pickle.dumps(buf).hex(), capture_output=True, text=True,
                          env={**os.environ, **config_env()}, timeout=scaled(120), check=False)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, f"the outsider failed ({proc.returncode}): {proc.stderr[-3000:]}"
    assert lines, f"the outsider failed ({proc.returncode}): {proc.stderr[-3000:]}"
    result: list[dict[str, Any]] = json.loads(lines[-1])
    return result


def _transfer(buf: Any, local: bytearray, write: bool) -> None:
    fut = buf.write_from(local, timeout=scaled(30)) if write else buf.read_into(local, timeout=scaled(30))
    fut.get(timeout=scaled(30))


def outside_the_region(desc: Any, backend: str) -> Iterator[Any]:
    """Forgeries of ``desc``: its size moved past the registration, and (for a dict context)
    each integer of ``backend``'s context moved 4 KiB on, to -1 and past 64 bits."""
    yield desc._replace(size=desc.size + 4096)
    ctx = desc.contexts.get(backend)
    if isinstance(ctx, dict):
        for key, value in ctx.items():
            if type(value) is int:
                for moved in (value + 4096, -1, value + (1 << 64)):
                    yield desc._replace(contexts={backend: {**ctx, key: moved}})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
