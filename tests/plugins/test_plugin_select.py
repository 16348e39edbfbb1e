"""Choosing and creating backends."""

from __future__ import annotations

import types
import warnings

import pytest

from tetrarch._plugins import PluginSource, Registry, _fallback, _known
from tetrarch.plugins import (
    BackendKind,
    BackendNotFound,
    BackendSpec,
    BackendUnavailable,
    hookimpl,
)
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

T, R, A = BackendKind.TRANSPORT, BackendKind.RDMA, BackendKind.ALLOCATOR


@pytest.fixture
def transports(fakes, make_registry) -> Registry:
    """fast (30, tcp) > slow (10, tcp+ipc) > off (99, unavailable) > ipconly (5, ipc)."""
    return make_registry(
        fakes.source(
            "fake-transports",
            fakes.spec(T, "fast", priority=30, schemes=("tcp",), capabilities={"local"}),
            fakes.spec(T, "slow", priority=10, schemes=("tcp", "ipc"), capabilities={"local", "multi-host"}),
            fakes.spec(T, "off", ok=False, priority=99, schemes=("tcp",)),
            fakes.spec(T, "ipconly", priority=5, schemes=("ipc",)),
        )
    )


def test_highest_priority_available_wins(transports: Registry) -> None:
    assert transports.select(T).name == "fast"


def test_require_filters_by_capability(transports: Registry) -> None:
    assert transports.select(T, request={"require": {"multi-host"}}).name == "slow"
    assert transports.select(T, request={"require": "multi-host"}).name == "slow"
    with pytest.raises(BackendUnavailable, match=r"capabilities \['gpu'\]"):
        transports.select(T, request={"require": {"gpu"}})


def test_ties_go_to_the_first_name(fakes, make_registry) -> None:
    registry = make_registry(fakes.source("d", fakes.spec(A, "b", priority=1), fakes.spec(A, "a", priority=1)))
    assert registry.select(A).name == "a"


def test_explicit_name_beats_env_and_priority(transports: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_TRANSPORT", "ipconly")
    assert transports.select(T, "slow").name == "slow"
    assert transports.select(T).name == "ipconly"
    monkeypatch.setenv("TETRARCH_TRANSPORT", "  ")
    assert transports.select(T).name == "fast"


def test_env_var_per_kind(fakes, make_registry, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = make_registry(
        fakes.source("d", fakes.spec(R, "r1", priority=9), fakes.spec(R, "r2"), fakes.spec(A, "a1", priority=9),
                     fakes.spec(A, "a2"))
    )
    monkeypatch.setenv("TETRARCH_RDMA_BACKEND", "r2")
    monkeypatch.setenv("TETRARCH_ALLOCATOR", "a2")
    assert registry.select(R).name == "r2"
    assert registry.select(A).name == "a2"


def test_plain_scheme_picks_highest_priority_serving_it(transports: Registry) -> None:
    assert transports.select(T, address="tcp://127.0.0.1:0").name == "fast"
    assert transports.select(T, address="ipc:///tmp/x.sock").name == "slow"


def test_qualified_scheme_names_the_backend(transports: Registry) -> None:
    assert transports.select(T, address="ipconly+ipc:///tmp/x").name == "ipconly"
    with pytest.raises(BackendUnavailable, match=r"'off'.*chosen by address"):
        transports.select(T, address="off+tcp://h:1")
    with pytest.raises(ValueError, match="cannot serve"):
        transports.select(T, address="ipconly+tcp://h:1")


def test_explicit_choice_must_agree_with_address(transports: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    assert transports.select(T, "slow", address="slow+ipc:///x").name == "slow"
    assert transports.select(T, "slow", address="ipc:///x").name == "slow"
    with pytest.raises(ValueError, match="names transport 'fast'"):
        transports.select(T, "slow", address="fast+tcp://h:1")
    monkeypatch.setenv("TETRARCH_TRANSPORT", "ipconly")
    with pytest.raises(ValueError, match="cannot serve"):
        transports.select(T, address="tcp://h:1")


def test_scheme_nobody_serves(transports: Registry) -> None:
    with pytest.raises(BackendNotFound, match="no installed transport serves udp://"):
        transports.select(T, address="udp://h:1")


def test_bad_addresses(transports: Registry) -> None:
    with pytest.raises(ValueError, match="no scheme"):
        transports.select(T, address="127.0.0.1:5")
    with pytest.raises(ValueError, match="only selects a transport"):
        transports.select(A, address="tcp://h:1")


def test_strip_scheme() -> None:
    assert Registry.strip_scheme("zmq+tcp://h:1") == "tcp://h:1"
    assert Registry.strip_scheme("tcp://h:1") == "tcp://h:1"
    assert Registry.strip_scheme("nng+ipc:///tmp/a") == "ipc:///tmp/a"
    with pytest.raises(ValueError):
        Registry.strip_scheme("h:1")


def test_unknown_name_lists_installed_backends(transports: Registry) -> None:
    with pytest.raises(BackendNotFound) as info:
        transports.select(T, "nope")
    message = str(info.value)
    assert "no transport backend named 'nope'" in message
    for name in ("fast (available; ", "slow (available; ", "off (unavailable", "ipconly (available; "):
        assert name in message
    assert isinstance(info.value, LookupError)


def test_known_first_party_name_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_known, "NOT_IMPLEMENTED_YET", frozenset())  # as if zmq and slurm were written
    registry = Registry(entry_points=False)  # as if no plugin distribution were installed
    with pytest.raises(BackendNotFound) as info:
        registry.select(T, "zmq")
    message = str(info.value)
    assert 'pip install "tetrarch[zmq]"' in message
    assert "tetrarch-transport-zmq" in message
    assert "ipc (" in message and "tcp (" in message
    with pytest.raises(BackendNotFound, match=r'tetrarch\[slurm\]'):
        registry.select(A, "slurm")


def test_disabled_first_party_choice_says_how_to_enable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_DISABLE_PLUGINS", "tetrarch-transport-zmq")
    with pytest.raises(BackendUnavailable,
                       match=r"disabled by TETRARCH_DISABLE_PLUGINS.*remove 'tetrarch-transport-zmq'"):
        Registry().select(T, "zmq")


def test_explicit_unavailable_choice_is_never_swapped(transports: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendUnavailable) as info:
        transports.select(T, "off")
    message = str(info.value)
    assert "fake off cannot run" in message and "fix off" in message
    assert "never replaced" in message and "fast" in message
    monkeypatch.setenv("TETRARCH_TRANSPORT", "off")
    with pytest.raises(BackendUnavailable, match="TETRARCH_TRANSPORT=off"):
        transports.select(T)


def test_conflicting_backend_cannot_be_selected(fakes, make_registry) -> None:
    registry = make_registry(fakes.source("dist-a", fakes.spec(A, "dup")), fakes.source("dist-b", fakes.spec(A, "dup")))
    with pytest.raises(BackendUnavailable, match=r"conflict.*dist-a.*dist-b"):
        registry.select(A, "dup")
    with pytest.raises(BackendUnavailable, match="no allocator backend is available"):
        registry.select(A)


def test_nothing_available_lists_why(fakes, make_registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_known, "NOT_IMPLEMENTED_YET", frozenset())  # only an implemented one is worth installing
    registry = make_registry(fakes.source("d", fakes.spec(A, "x", ok=False)))
    with pytest.raises(BackendUnavailable) as info:
        registry.select(A)
    assert "fake x cannot run" in str(info.value)
    assert 'pip install "tetrarch[slurm]"' in str(info.value)


def test_a_plugin_policy_goes_before_the_default(fakes, make_registry) -> None:
    class PreferSlowest:
        @hookimpl
        def tetrarch_select_backend(self, kind, candidates, request):
            return min(candidates, key=lambda c: c.priority)

    registry = make_registry(
        fakes.source("d", fakes.spec(A, "hi", priority=9), fakes.spec(A, "lo", priority=1)),
        PluginSource(PreferSlowest(), "policy", "policy-dist"),
    )
    assert registry.select(A).name == "lo"
    assert registry.select(A, "hi").name == "hi"  # policies never override an explicit choice


def test_policy_returning_a_stranger_is_rejected(fakes, make_registry) -> None:
    class Rogue:
        @hookimpl
        def tetrarch_select_backend(self, kind, candidates, request):
            return BackendSpec(A, "ghost", "types:SimpleNamespace")

    registry = make_registry(fakes.source("d", fakes.spec(A, "real")), PluginSource(Rogue(), "rogue", "rogue-dist"))
    with pytest.raises(BackendUnavailable, match="not an available candidate"):
        registry.select(A)


def test_create_caches_one_instance_per_backend(transports: Registry) -> None:
    first = transports.create(T)
    assert isinstance(first, types.SimpleNamespace)
    assert transports.create(T, "fast") is first
    assert transports.create(T, address="tcp://h:1") is first
    assert transports.create(T, "slow") is not first


def test_create_factory_import_error_names_the_plugin(fakes, make_registry) -> None:
    registry = make_registry(fakes.source("bad-factory", fakes.spec(A, "x", factory="tetrarch_no_such_mod:X")))
    with pytest.raises(BackendUnavailable, match=r"'tetrarch_no_such_mod:X'.*bad-factory 1.0.*ModuleNotFoundError"):
        registry.create(A)
    registry = make_registry(fakes.source("bad-attr", fakes.spec(A, "y", factory="types:NoSuchThing")))
    with pytest.raises(BackendUnavailable, match="AttributeError"):
        registry.create(A, "y")


def test_close_closes_created_instances(fakes, make_registry) -> None:
    registry = make_registry(fakes.source("d", fakes.spec(A, "x", factory="io:BytesIO")))
    stream = registry.create(A)
    registry.close()
    assert stream.closed
    assert registry.create(A) is not stream


@pytest.fixture
def rdma(fakes, make_registry, monkeypatch: pytest.MonkeyPatch) -> Registry:
    monkeypatch.setattr(_fallback, "_fallback_warned", False)
    return make_registry(
        fakes.source("fake-hw", fakes.spec(R, "hw", ok=False, priority=100)),
        fakes.source("tetrarch", fakes.spec(R, "copy", priority=0), name="core-fake", version="0.1.0"),
    )


def test_rdma_fallback_warns_once(rdma: Registry) -> None:
    with pytest.warns(RuntimeWarning, match="falls back to 'copy'; skipped: hw .*fake hw cannot run"):
        assert rdma.select(R).name == "copy"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rdma.select(R).name == "copy"


def test_rdma_fallback_can_be_refused(rdma: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendUnavailable, match="fallback to 'copy' is disabled"):
        rdma.select(R, request={"allow_fallback": False})
    monkeypatch.setenv("TETRARCH_RDMA_FALLBACK", "0")
    with pytest.raises(BackendUnavailable, match="hw"):
        rdma.select(R)
    assert rdma.select(R, "copy").name == "copy"  # an explicit choice is not a fallback


def test_an_on_request_backend_is_never_picked_automatically(fakes, make_registry,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend that works here but must not carry traffic unasked (efa over a software
    provider): listed ``available on request``, selected by name or setting only."""
    monkeypatch.setattr(_fallback, "_fallback_warned", False)
    registry = make_registry(
        fakes.source("fake-hw", fakes.spec(R, "hw", priority=100, on_request=True)),
        fakes.source("tetrarch", fakes.spec(R, "copy", priority=0), name="core-fake", version="0.1.0"),
    )
    (row,) = [r for r in registry.statuses(R) if r.name == "hw"]
    assert row.on_request and row.shown == "available on request"
    with pytest.warns(RuntimeWarning, match="falls back to 'copy'; skipped: hw .*available on request"):
        assert registry.select(R).name == "copy"
    assert registry.select(R, "hw").name == "hw"
    monkeypatch.setenv("TETRARCH_RDMA_BACKEND", "hw")
    assert registry.select(R).name == "hw"
    monkeypatch.delenv("TETRARCH_RDMA_BACKEND")
    only = make_registry(fakes.source("fake-hw", fakes.spec(A, "lonely", on_request=True)))
    with pytest.raises(BackendUnavailable, match="no allocator backend is available"):
        only.select(A)
    assert "passed over" in only.explain(A).render()


@pytest.mark.isolated  # the client runtime starts in a fresh interpreter
def test_a_bad_transport_variable_is_named_when_the_client_starts(run_isolated) -> None:
    res = run_isolated("""
        from tetrarch import this_host
        try:
            this_host()
        except Exception as exc:
            print(f"{type(exc).__name__}: {exc}")
        """, timeout=60, env={"TETRARCH_TRANSPORT": "bogus"})
    assert res.returncode == 0, res.stderr
    message = res.stdout.strip()
    assert message.startswith("BackendNotFound: no transport backend named 'bogus'"), message
    assert "chosen by TETRARCH_TRANSPORT=bogus" in message, message  # the variable, not an argument
    assert "ipc (available" in message and "tcp (available" in message, message  # what to choose instead


def test_a_transport_variable_naming_an_absent_plugin_gives_its_install_hint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_TRANSPORT", "zmq")
    with pytest.raises(BackendNotFound) as info:
        Registry(entry_points=False).select(T)  # as if tetrarch-transport-zmq were not installed
    message = str(info.value)
    assert "'zmq' (chosen by TETRARCH_TRANSPORT=zmq)" in message and 'pip install "tetrarch[zmq]"' in message
    assert "ipc (" in message and "tcp (" in message
