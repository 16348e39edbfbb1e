"""The first-party plugin distributions report the truth about this machine.

``tetrarch-alloc-local`` registers the ``local`` allocator (a distribution core depends on;
``tests/kernel/test_local_allocator.py``).
"""

from __future__ import annotations

import ctypes.util
import importlib.machinery
import importlib.metadata
import importlib.util
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from tetrarch._plugins import PluginState, Registry, known_backend
from tetrarch.plugins import BackendKind, BackendUnavailable, ProbeResult, Status, Transport
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

T, R, A = BackendKind.TRANSPORT, BackendKind.RDMA, BackendKind.ALLOCATOR
FIRST_PARTY = {
    (T, "zmq"): "tetrarch-transport-zmq",
    (T, "nng"): "tetrarch-transport-nng",
    (R, "verbs"): "tetrarch-rdma-verbs",
    (R, "efa"): "tetrarch-rdma-efa",
    (A, "local"): "tetrarch-alloc-local",
    (A, "slurm"): "tetrarch-alloc-slurm",
}


def _declared_probe(kind: BackendKind, name: str) -> Callable[[], ProbeResult]:
    """The probe a first-party backend declares (its ``BackendSpec``), not imported from the plugin's modules."""
    spec = next(r.spec for r in Registry().statuses(kind) if r.name == name and r.spec is not None)
    assert spec.probe is not None
    return spec.probe


@pytest.fixture(scope="module")
def rows() -> dict[tuple[BackendKind, str], object]:
    registry = Registry()
    assert all(p.state is PluginState.LOADED for p in registry.plugins() if p.distribution in FIRST_PARTY.values())
    return {(r.kind, r.name): r for r in registry.statuses()}


def test_every_first_party_distribution_is_installed_and_loaded(rows) -> None:
    for key, dist in FIRST_PARTY.items():
        row = rows[key]
        assert row.distribution == dist
        assert row.version == importlib.metadata.version(dist)
        assert row.status in (Status.AVAILABLE, Status.UNAVAILABLE, Status.NOT_IMPLEMENTED), row
        assert row.spec is not None and row.spec.extra == key[1]
        # core's table (used when the distribution is absent) agrees with the plugin itself
        assert row.spec.implemented == known_backend(*key).implemented, key


@pytest.mark.parametrize(("name", "module", "dist"), [("zmq", "zmq", "pyzmq"), ("nng", "pynng", "pynng")])
def test_transport_plugins(rows, name: str, module: str, dist: str) -> None:
    row = rows[(T, name)]
    assert row.spec.schemes == ("tcp", "ipc")
    found = importlib.util.find_spec(module) is not None
    if row.spec.implemented:
        if found:
            assert row.status is Status.AVAILABLE
            assert row.reason == f"{dist} {importlib.metadata.version(dist)}"
        else:
            assert row.status is Status.UNAVAILABLE
            assert row.reason == f"{dist} is not installed"
            assert f'pip install "tetrarch[{name}]"' in row.hint
        return
    assert row.status is Status.NOT_IMPLEMENTED
    if found:
        version = importlib.metadata.version(dist)
        assert row.reason == f"the {name} transport is not implemented yet (found here: {dist} {version})"
    else:
        assert row.reason == f"the {name} transport is not implemented yet (also: {dist} is not installed)"
    assert row.hint.startswith("use the 'ipc' (same host only)")
    assert row.hint.endswith(" transport instead")


def test_zmq_probe_without_pyzmq(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyzmq missing: unavailable, with the install command, and an explicit choice raises that reason."""
    import tetrarch._plugins._helpers as helpers

    probe = _declared_probe(T, "zmq")
    real = helpers.python_library_found
    monkeypatch.setattr(helpers, "python_library_found", lambda m, d: None if m == "zmq" else real(m, d))
    result = probe()
    assert not result.ok
    assert result.reason == "pyzmq is not installed"
    assert 'pip install "tetrarch[zmq]"' in result.remedy
    with pytest.raises(BackendUnavailable, match=r"'zmq' .* is unavailable: pyzmq is not installed.*tetrarch\[zmq\]"):
        Registry().create(T, "zmq")


def test_verbs_plugin(rows) -> None:
    """verbs is implemented; here it is unavailable with its probe's exact reason (plugins/rdma_verbs/tests)."""
    row = rows[(R, "verbs")]
    probe = _declared_probe(R, "verbs")
    assert row.spec.priority == 100
    result = probe()
    assert row.status is (Status.AVAILABLE if result.ok else Status.UNAVAILABLE)
    assert result.reason in row.reason


def test_efa_plugin(rows) -> None:
    row = rows[(R, "efa")]
    assert row.spec.priority == 90 and row.status in (Status.AVAILABLE, Status.UNAVAILABLE)
    library = ctypes.util.find_library("fabric")
    if library is None:
        assert row.reason.startswith("libfabric shared library not found")
    elif row.on_request:  # no EFA device, software providers: available, but only when chosen
        assert row.status is Status.AVAILABLE and row.shown == "available on request"
        assert "has no 'efa' provider (it needs an EFA device)" in row.reason
        assert "it uses the software provider 'tcp;ofi_rxm'" in row.reason or "'shm'" in row.reason, row.reason
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback warning names efa as skipped
            assert Registry().select(R).name != "efa", "an on-request backend was picked automatically"
        assert Registry().select(R, "efa").name == "efa"
    elif row.status is Status.UNAVAILABLE:  # no EFA device and no software provider with RMA
        assert "has no 'efa' provider: it needs an EFA device" in row.reason
        assert "TETRARCH_EFA_PROVIDER=shm" in row.hint


def test_allocator_plugins(rows) -> None:
    assert rows[(A, "local")].status is Status.AVAILABLE
    slurm = rows[(A, "slurm")]
    assert slurm.status in (Status.AVAILABLE, Status.UNAVAILABLE)
    if slurm.status is Status.UNAVAILABLE:  # no cluster answers here (plugins/alloc_slurm/tests starts one)
        assert "SLURM_CONF" in slurm.hint and "local-slurm" in slurm.hint, slurm


def test_efa_probe_when_libfabric_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    efa_probe = _declared_probe(R, "efa")
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libfabric.so.1")
    monkeypatch.setenv("TETRARCH_EFA_PROVIDER", "shm")
    found = efa_probe()
    assert found.ok and "provider 'shm' (a software provider, not EFA hardware" in found.reason, found


def test_zmq_factory_builds_a_transport() -> None:
    transport = Registry().create(T, "zmq")
    assert isinstance(transport, Transport) and type(transport).__name__ == "ZmqTransport"


@pytest.mark.isolated
def test_listing_imports_no_heavy_library(run_scenario) -> None:
    result = run_scenario(Path(__file__).resolve().parent / "scenarios" / "list_plugins.py", timeout=30)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout
