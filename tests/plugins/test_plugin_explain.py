"""``tetrarch plugins --explain KIND [ADDRESS]`` and the errors of bad transport names, schemes and addresses.

The walk is recorded by :meth:`Registry.select` itself (``Registry.explain``), so what
it prints is what selection does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tetrarch._plugins import BackendNotFound, Registry, _known
from tetrarch._transport._socket import IpcTransport, TcpTransport
from tetrarch.plugins import BackendKind, hookimpl
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))
T = BackendKind.TRANSPORT


def explain_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tetrarch", "plugins", "--explain", *args], capture_output=True,
                          text=True, timeout=scaled(30), env={**os.environ, **(env or {})})


def _decided(text: str) -> list[str]:
    return [line.split()[1] for line in text.splitlines() if line.lstrip().startswith("->")]


@pytest.mark.isolated
def test_explain_transport_walks_the_rules_and_names_the_winner() -> None:
    res = explain_cli("transport")
    assert res.returncode == 0, res.stderr
    assert "not set (neither configure(transport=...) nor TETRARCH_TRANSPORT)" in res.stdout
    assert "no address given" in res.stdout and "no plugin hook chose" in res.stdout
    assert _decided(res.stdout) == ["5."], res.stdout
    assert res.stdout.rstrip().endswith("selected: ipc (tetrarch 0.1.0)")


@pytest.mark.isolated
def test_explain_shows_the_environment_deciding_and_a_contradicting_address() -> None:
    res = explain_cli("transport", env={"TETRARCH_TRANSPORT": "tcp"})
    assert _decided(res.stdout) == ["2."] and "TETRARCH_TRANSPORT=tcp chooses 'tcp'" in res.stdout
    assert "selected: tcp" in res.stdout
    res = explain_cli("transport", "ipc://@x", env={"TETRARCH_TRANSPORT": "tcp"})
    assert res.returncode == 1
    assert "no backend selected: ArgumentError: transport 'tcp' (TETRARCH_TRANSPORT=tcp) cannot serve" in res.stdout


@pytest.mark.isolated
def test_explain_with_an_address_filters_by_scheme_or_names_the_backend() -> None:
    res = explain_cli("transport", "tcp://127.0.0.1:0")
    assert "only transports serving tcp:// are candidates" in res.stdout and "selected: tcp" in res.stdout
    res = explain_cli("transport", "pigeon+tcp://h:1", "--json")
    assert res.returncode == 1
    out = json.loads(res.stdout)
    assert out["winner"] is None and [s["decided"] for s in out["steps"]] == [False, False, True]
    assert out["error"].startswith("BackendNotFound: no transport backend named 'pigeon'")


@pytest.mark.isolated
def test_explain_allocator_and_rdma_go_through_the_same_walk() -> None:
    res = explain_cli("allocator", "--require", "same-host")
    assert res.returncode == 0, res.stderr
    assert "having ['same-host']: 'local'" in res.stdout and "applies to transports only" in res.stdout
    res = explain_cli("rdma")
    assert "TETRARCH_RDMA_BACKEND" in res.stdout and "decision" in res.stdout
    assert explain_cli("allocator", "tcp://h:1").returncode == 1  # an address selects transports only


def test_explain_names_the_plugin_whose_policy_hook_decided(make_registry, fakes) -> None:
    class Policy:
        @hookimpl
        def tetrarch_select_backend(self, kind, candidates, request):
            return next((c for c in candidates if c.name == "slow"), None)

    fast, slow = fakes.spec(T, "fast", priority=9, schemes=("tcp",)), fakes.spec(T, "slow", schemes=("tcp",))
    registry = make_registry(fakes.source("dist-a", fast, slow), fakes.source("dist-p", name="mypolicy"))
    registry.plugin_manager.register(Policy(), name="mypolicy-hook")
    explanation = registry.explain(T)
    assert explanation.winner is not None and explanation.winner.name == "slow"
    decided = [s for s in explanation.steps if s.decided]
    assert [s.rule for s in decided] == ["hook"] and "'mypolicy-hook' chose 'slow'" in decided[0].text
    assert registry.select(T).name == "slow"  # the walk and the selection agree


# ---------------------------------------------------------------- bad input


@pytest.fixture
def zmq_not_installed(monkeypatch: pytest.MonkeyPatch) -> Registry:
    """Core alone, as on a host where no transport plugin is installed (zmq and nng implemented)."""
    monkeypatch.setattr(_known, "NOT_IMPLEMENTED_YET", frozenset())
    return Registry(entry_points=False)


def test_unknown_transport_name_lists_every_transport_scheme_and_install_hint(zmq_not_installed: Registry) -> None:
    with pytest.raises(BackendNotFound) as info:
        zmq_not_installed.select(T, "carrier-pigeon")
    message = str(info.value)
    assert "no transport backend named 'carrier-pigeon'" in message
    assert "ipc (available; ipc://), tcp (available; tcp://)" in message
    assert 'nng (pip install "tetrarch[nng]"), zmq (pip install "tetrarch[zmq]")' in message


def test_unknown_scheme_lists_every_transport_scheme_and_install_hint(zmq_not_installed: Registry) -> None:
    with pytest.raises(BackendNotFound) as info:
        zmq_not_installed.select(T, address="udp://h:1")
    message = str(info.value)
    assert "no installed transport serves udp:// addresses" in message
    assert "ipc (available; ipc://), tcp (available; tcp://)" in message and 'pip install "tetrarch[zmq]"' in message
    with pytest.raises(BackendNotFound, match=r"named 'pigeon'.*ipc \(available; ipc://\)"):
        zmq_not_installed.select(T, address="pigeon+tcp://h:1")


def test_a_missing_first_party_transport_chosen_by_name_says_how_to_install_it(zmq_not_installed: Registry) -> None:
    hint = r"'zmq' comes with tetrarch-transport-zmq: pip install \"tetrarch\[zmq\]\""
    with pytest.raises(BackendNotFound, match=hint):
        zmq_not_installed.select(T, address="zmq+tcp://h:1")


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:5", "expected e.g. 'tcp://127.0.0.1:0'"),
        ("+tcp://h:1", "a qualified scheme reads 'backend+scheme://'"),
        ("zmq+://h:1", "a qualified scheme reads 'backend+scheme://'"),
    ],
)
def test_a_malformed_address_names_the_expected_form(address: str, expected: str) -> None:
    with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace("+", r"\+")):
        Registry(entry_points=False).select(T, address=address)


@pytest.mark.parametrize(
    ("transport", "address", "expected"),
    [
        (TcpTransport, "tcp://localhost", "must look like tcp://host:port"),
        (TcpTransport, "tcp://localhost:http", "must look like tcp://host:port"),
        (IpcTransport, "ipc://", r"needs a path, e\.g\. ipc:///tmp/x\.sock or ipc://@name"),
        (TcpTransport, "ipc://@x", "serves tcp addresses"),
    ],
)
def test_a_malformed_address_given_to_a_transport_names_the_form_of_its_scheme(transport, address, expected) -> None:
    t = transport()
    try:
        with pytest.raises(ValueError, match=expected):
            t.listen(address, None)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=expected):
            t.connect(address, None, timeout=1.0)  # type: ignore[arg-type]
    finally:
        t.close()
