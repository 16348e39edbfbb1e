"""Bad input through the efa backend (issue 13, "Bad input"): each gives an error naming the
cause and the fix, within the transfer's timeout, and the next transfer on a healthy path works."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tetrarch
from tetrarch import configured, this_host
from tetrarch.testing import scaled
from tetrarch.testing.rdma import Holder, backend_instance, descriptor_of, digest, holders, pattern

pytestmark = pytest.mark.timeout(scaled(120))


@pytest.mark.parametrize("provider", ["nope", "udp"])
def test_a_provider_without_rdm_rma_is_refused_with_the_fix(provider: str) -> None:
    with configured(efa_provider=provider):
        procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        holder = procs.spawn("bad_provider", Holder)
        with pytest.raises(tetrarch.ActorError) as caught:
            holder.make.call_one("x", 64, 1, "efa").get(timeout=scaled(60))
        text = str(caught.value)
        cause = "has no such provider" if provider == "nope" else "offers it without one-sided RMA on RDM endpoints"
        assert f"{cause}: {provider!r} (TETRARCH_EFA_PROVIDER)" in text, text
        assert "set TETRARCH_EFA_PROVIDER to one of: tcp;ofi_rxm" in text, text
    finally:
        procs.stop().get(timeout=scaled(30))


@pytest.mark.usefixtures("efa_provider")
class TestEfaBadHandles:
    provider = "tcp;ofi_rxm"  # enforces keys: a dropped buffer fails in the provider, not only at the owner

    @pytest.fixture(scope="class")
    @classmethod
    def owner(cls) -> Iterator[Any]:
        with holders("bad_handles") as mesh:
            yield mesh

    def test_a_descriptor_of_a_backend_the_reader_lacks(self, owner: Any) -> None:
        from tetrarch.rdma import RDMABuffer

        buf = owner.make.call_one("lacks", 4096, 1, "efa").get(timeout=scaled(60))
        desc = descriptor_of(buf)
        alien = RDMABuffer._from_descriptor(desc._replace(contexts={"no-such-backend": {}}))
        with pytest.raises(Exception, match="no-such-backend") as caught:
            alien.read_into(bytearray(4096), timeout=scaled(10)).get(timeout=scaled(10))
        assert not isinstance(caught.value, TimeoutError), caught.value
        dst = bytearray(4096)
        buf.read_into(dst, timeout=scaled(30)).get(timeout=scaled(30))  # the real handle still works
        assert dst == pattern(4096, 1)

    def test_a_dropped_key_fails_clearly_and_the_next_transfer_works(self, owner: Any) -> None:
        from tetrarch.rdma import RDMAError

        gone = owner.make.call_one("gone", 1 << 20, 2, "efa").get(timeout=scaled(60))
        kept = owner.make.call_one("kept", 1 << 20, 3, "efa").get(timeout=scaled(60))
        gone.read_into(bytearray(1 << 20), timeout=scaled(30)).get(timeout=scaled(30))  # confirmed and cached
        gone.drop().get(timeout=scaled(10))
        with pytest.raises(RDMAError, match="dropped"):
            gone.read_into(bytearray(1 << 20), timeout=scaled(10)).get(timeout=scaled(10))
        dst = bytearray(1 << 20)
        kept.read_into(dst, timeout=scaled(10)).get(timeout=scaled(10))
        assert digest(dst) == digest(pattern(1 << 20, 3))


def test_without_an_efa_device_the_backend_works_on_request_over_a_software_provider() -> None:
    """``tetrarch plugins`` says "available on request" and names the provider: chosen by name,
    the backend moves bytes over it, with TETRARCH_EFA_PROVIDER unset."""
    from tetrarch_rdma_efa._plugin import chosen_provider, probe

    with configured(efa_provider=None):
        if chosen_provider() == "efa":
            pytest.skip("libfabric offers 'efa' here (or no software provider with RMA): nothing falls back")
        found = probe()
        provider = chosen_provider()
        assert found.ok and found.on_request and f"it uses the software provider {provider!r}" in found.reason
        with holders("on-request") as mesh:
            buf = mesh.make.call_one("r", 1 << 20, 5, "efa").get(timeout=scaled(60))
            dst = bytearray(1 << 20)
            buf.read_into(dst, timeout=scaled(20)).get(timeout=scaled(20))
            assert digest(dst) == digest(pattern(1 << 20, 5))
        assert provider in backend_instance("efa")._endpoints
