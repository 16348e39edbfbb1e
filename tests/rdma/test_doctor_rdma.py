"""``tetrarch doctor rdma`` on this machine: every RDMA backend, its probe, devices and the selection."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tetrarch.plugins import BackendKind, get_registry
from tetrarch.testing import scaled


@pytest.mark.timeout(scaled(60))
@pytest.mark.filterwarnings("ignore::tetrarch.rdma.RDMATcpFallbackWarning")
def test_doctor_rdma_reports_every_backend_and_the_selection() -> None:
    done = subprocess.run([sys.executable, "-m", "tetrarch", "doctor", "rdma"], capture_output=True, text=True,
                          timeout=scaled(50), check=False)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    for row in get_registry().statuses(BackendKind.RDMA):
        assert f"  {row.name:<6} {row.shown}: {row.reason or '-'}" in text
    assert "RDMA devices (sysfs):" in text
    winner = get_registry().explain(BackendKind.RDMA).winner
    assert winner is not None and f"selected: {winner.name}" in text
    assert "RDMATcpFallbackWarning" not in done.stderr
