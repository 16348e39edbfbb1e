"""The verbs backend through the RDMA contract (``RdmaSuite``): needs an RDMA device, so it
skips here with the probe's reason; on a host with one (or Soft-RoCE: ``rdma link add rxe0
type rxe netdev eth0``) it runs every transfer through real queue pairs."""

from __future__ import annotations

import pytest

from tetrarch.rdma import RDMAError
from tetrarch.testing.rdma import RdmaSuite
from tetrarch_rdma_verbs._plugin import probe


def _skip_without_device() -> None:
    result = probe()
    if not result.ok:
        pytest.skip(f"verbs is unavailable here: {result.reason}")


class TestVerbsRdma(RdmaSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> str:
        _skip_without_device()
        return "verbs"


@pytest.mark.timeout(30)
def test_starting_the_backend_without_a_device_names_the_cause() -> None:
    """The real start path (pyverbs import, sysfs device selection) fails with the fix, not a traceback from C."""
    if probe().ok:
        pytest.skip("this machine has an RDMA device")

    from tetrarch_rdma_verbs._import import PyverbsMissing, locate
    from tetrarch_rdma_verbs._verbs import VerbsRdmaBackend

    backend = VerbsRdmaBackend()
    if locate() is None:  # no pyverbs at all (e.g. a GPU machine without rdma-core): the install fix
        with pytest.raises(PyverbsMissing, match=r"apt-get install python3-pyverbs.*pip install pyverbs"):
            backend.start(None)  # type: ignore[arg-type] - start fails before it uses the host
    else:
        with pytest.raises(RDMAError, match=r"no RDMA device here|no usable RDMA device") as info:
            backend.start(None)  # type: ignore[arg-type] - start fails before it uses the host
        assert "rdma_rxe" in str(info.value) or "ibstat" in str(info.value)
    backend.close()
