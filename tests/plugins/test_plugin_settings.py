"""The plugin layer reads its switches through tetrarch's settings: a value set from code counts like the variable."""

from __future__ import annotations

import types

import pytest

from tetrarch._config import configure, configured
from tetrarch._plugins import PluginSource, PluginState, Registry, _fallback
from tetrarch.plugins import BackendKind, BackendUnavailable, PluginLoadError, hookimpl

pytestmark = pytest.mark.timeout(60)

T, R, A = BackendKind.TRANSPORT, BackendKind.RDMA, BackendKind.ALLOCATOR


@pytest.fixture
def registry(fakes, make_registry) -> Registry:
    """Per kind: ``hi`` (priority 9) and ``lo``; transports also ``off`` (unavailable) and ``ipconly``."""
    specs = [fakes.spec(kind, name, priority=p, schemes=("tcp",)) for kind in (T, R, A)
             for name, p in (("hi", 9), ("lo", 0))]
    specs += [fakes.spec(T, "off", ok=False, schemes=("tcp",)), fakes.spec(T, "ipconly", schemes=("ipc",))]
    return make_registry(fakes.source("d", *specs))


@pytest.mark.parametrize(("kind", "key", "env"), [(T, "transport", "TETRARCH_TRANSPORT"),
                                                  (R, "rdma_backend", "TETRARCH_RDMA_BACKEND"),
                                                  (A, "allocator", "TETRARCH_ALLOCATOR")])
def test_a_choice_from_code_ranks_where_the_variable_does(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, kind: BackendKind, key: str, env: str
) -> None:
    assert registry.select(kind).name == "hi"
    configure(**{key: "lo"})
    assert registry.select(kind).name == "lo"
    assert registry.select(kind, "hi").name == "hi"  # an explicit argument still comes first
    monkeypatch.setenv(env, "hi")
    assert registry.select(kind).name == "lo"  # code beats the environment
    configure(**{key: None})
    assert registry.select(kind).name == "hi"
    with configured(**{key: "lo"}):
        assert registry.select(kind).name == "lo"
    assert registry.select(kind).name == "hi"


def test_errors_name_configure_as_the_source(registry: Registry) -> None:
    configure(transport="off")
    chosen = r"'off' \(d 1.0\), chosen by configure\(transport='off'\), is unavailable"
    with pytest.raises(BackendUnavailable, match=chosen):
        registry.select(T)
    configure(transport="ipconly")
    with pytest.raises(ValueError, match=r"transport 'ipconly' \(configure\(transport='ipconly'\)\) cannot serve"):
        registry.select(T, address="tcp://h:1")
    configure(transport="lo")
    with pytest.raises(ValueError, match=r"names transport 'hi' but configure\(transport='lo'\) chose 'lo'"):
        registry.select(T, address="hi+tcp://h:1")
    assert registry.select(T, address="lo+tcp://h:1").name == "lo"


def test_disable_plugins_from_code(fakes, make_registry) -> None:
    configure(disable_plugins=["fake-dist"])
    registry = make_registry(fakes.source("fake-dist", fakes.spec(T, "x")))
    assert [p.state for p in registry.plugins() if p.distribution == "fake-dist"] == [PluginState.DISABLED]


def test_plugins_strict_from_code(make_registry) -> None:
    bad = PluginSource(types.SimpleNamespace(tetrarch_allocators=hookimpl(lambda: 1 / 0)), "bad", "bad-dist")
    make_registry(bad)
    with configured(plugins_strict=True), pytest.raises(PluginLoadError, match="'bad' from bad-dist"):
        make_registry(bad)


def test_an_invalid_strict_variable_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_PLUGINS_STRICT", "sometimes")
    with pytest.raises(ValueError, match="TETRARCH_PLUGINS_STRICT='sometimes' must be a boolean"):
        Registry(entry_points=False)


def test_rdma_fallback_refused_from_code(fakes, make_registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fallback, "_fallback_warned", True)  # no warning from an allowed fallback
    registry = make_registry(
        fakes.source("fake-hw", fakes.spec(R, "hw", ok=False, priority=100)),
        fakes.source("tetrarch", fakes.spec(R, "copy"), name="core-fake", version="0.1.0"),
    )
    assert registry.select(R).name == "copy"
    configure(rdma_fallback=False)
    with pytest.raises(BackendUnavailable, match="fallback to 'copy' is disabled"):
        registry.select(R)
    monkeypatch.setenv("TETRARCH_RDMA_FALLBACK", "1")
    with pytest.raises(BackendUnavailable, match="fallback to 'copy' is disabled"):
        registry.select(R)  # code beats the environment
