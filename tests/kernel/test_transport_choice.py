"""One allocation, one transport: the client's choice reaches its host agents and procs (issue 11, point 4).

``TETRARCH_TRANSPORT=X`` on the client makes every process of the allocation listen and
dial with X (``TETRARCH_ALLOC_TRANSPORT``, not each process's own environment); a host
agent or proc that cannot use the client's transport fails to start with an error
naming it, never a hang.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from tetrarch._plugins import BackendKind, BackendNotFound, Registry, _known, _registry, split_address
from tetrarch._runtime.process._root import launched_root
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(90))

SCENARIO = Path(__file__).parent / "scenarios" / "transport_travel.py"
#: The transport this run of the suite uses (``make test`` runs tests/kernel once more per plugin transport).
CURRENT = os.environ.get("TETRARCH_TRANSPORT") or "ipc"
#: The builtin transports and this run's. Only this run's param depends on the run's transport: the
#: others pin theirs, ran in the main pass already, and are left out of the per-transport runs.
TRANSPORTS = [pytest.param(t, marks=() if t == CURRENT else pytest.mark.transport_independent)
              for t in sorted({"ipc", "tcp", CURRENT})]


def _served_by(address: str, transport: str) -> bool:
    """Whether ``address`` is one the transport ``transport`` listens on (plain or qualified scheme)."""
    backend, scheme, _ = split_address(address)
    spec = Registry().select(BackendKind.TRANSPORT, transport)
    return backend in (None, transport) and scheme in spec.schemes


@pytest.mark.isolated
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_process_of_an_allocation_uses_the_client_transport(run_scenario, transport: str) -> None:
    res = run_scenario(SCENARIO, "addresses", timeout=60, env={"TETRARCH_TRANSPORT": transport})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["client_transport"] == transport and _served_by(out["client"], transport), out
    assert len(out["procs"]) == 2
    for proc in out["procs"]:
        assert proc["transport"] == transport and proc["alloc_transport"] == transport, proc
        assert _served_by(proc["address"], transport), proc
        assert _served_by(proc["host_agent"], transport), proc


@pytest.mark.isolated
@pytest.mark.transport_independent  # pins ipc and tcp itself
def test_a_host_agent_told_another_transport_fails_to_start_naming_both(run_scenario) -> None:
    res = run_scenario(SCENARIO, "mismatch", "tcp", timeout=60, env={"TETRARCH_TRANSPORT": "ipc"})
    assert res.returncode == 0, res.stderr
    error = json.loads(res.stdout.strip().splitlines()[-1])["error"]
    assert error.startswith("ProcessStartError: host agent 0 failed to start (exit code 2)"), error
    assert "TETRARCH_ALLOC_TRANSPORT=tcp" in error and "serves tcp://" in error, error
    assert "listens at 'ipc://" in error and "cannot mix transports" in error, error


_PIGEON = '''
from tetrarch._transport._socket import TcpTransport
from tetrarch.plugins import BackendKind, BackendSpec, hookimpl


class PigeonTransport(TcpTransport):
    name = "pigeon"


@hookimpl
def tetrarch_transports():
    return [BackendSpec(BackendKind.TRANSPORT, "pigeon", "pigeon_transport:PigeonTransport", schemes=("tcp",))]
'''


@pytest.mark.isolated
@pytest.mark.transport_independent  # pins its own transport
def test_a_host_without_the_client_transport_plugin_fails_to_start_naming_it(run_scenario, tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "pigeon_transport-1.0.dist-info"
    dist.mkdir(parents=True)
    (site / "pigeon_transport.py").write_text(textwrap.dedent(_PIGEON))
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pigeon-transport\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[tetrarch]\npigeon = pigeon_transport\n")
    res = run_scenario(SCENARIO, "missing", str(site), timeout=60, env={"TETRARCH_TRANSPORT": "pigeon"},
                       pythonpath=[site])
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["client_transport"] == "pigeon" and out["client"].startswith("tcp://"), out
    error = out["error"]
    assert error.startswith("ProcessStartError: host agent 0 failed to start (exit code 2)"), error
    assert "host agent 0 cannot use the allocation's transport (TETRARCH_ALLOC_TRANSPORT=pigeon" in error, error
    assert "no transport backend named 'pigeon'" in error and "ipc (available; ipc://)" in error, error


@pytest.mark.transport_independent  # no process, no connection
def test_a_missing_first_party_transport_names_its_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # A host where tetrarch-transport-zmq is not installed (no entry points), zmq implemented.
    monkeypatch.setattr(_known, "NOT_IMPLEMENTED_YET", frozenset())
    monkeypatch.setattr(_registry, "_registry", Registry(entry_points=False))
    monkeypatch.setenv("TETRARCH_ALLOC_TRANSPORT", "zmq")
    with pytest.raises(BackendNotFound) as info:
        launched_root("proc", b"s" * 32, "p[0]", "zmq+tcp://127.0.0.1:1", "proc p[0]")
    message = str(info.value)
    assert message.startswith("proc p[0] cannot use the allocation's transport (TETRARCH_ALLOC_TRANSPORT=zmq"), message
    assert message.endswith('install it on this host: pip install "tetrarch[zmq]"'), message
