"""Loading plugins and reporting their status."""

from __future__ import annotations

import importlib.metadata
import threading
import types

import pytest

from tetrarch._plugins import (
    KNOWN_BACKENDS,
    PluginLoadError,
    PluginSource,
    PluginState,
    Registry,
    get_registry,
    reset_registry,
)
from tetrarch._plugins._loader import load_entry_points
from tetrarch.plugins import BackendKind, BackendSpec, ProbeResult, Status, hookimpl
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

T, R, A = BackendKind.TRANSPORT, BackendKind.RDMA, BackendKind.ALLOCATOR


def rows_by_key(registry: Registry) -> dict[tuple[BackendKind, str], list]:
    out: dict[tuple[BackendKind, str], list] = {}
    for row in registry.statuses():
        out.setdefault((row.kind, row.name), []).append(row)
    return out


def test_builtins_are_registered_under_core() -> None:
    registry = Registry(entry_points=False)
    rows = rows_by_key(registry)
    for key in [(T, "ipc"), (T, "tcp"), (R, "tcp"), (R, "shm")]:
        (row,) = rows[key]
        assert row.distribution == "tetrarch"
        assert row.version == "0.1.0"
        assert row.status in (Status.AVAILABLE, Status.UNAVAILABLE, Status.NOT_IMPLEMENTED)
        assert row.spec is not None and row.spec.factory.startswith("tetrarch.")
    assert rows[(T, "ipc")][0].spec.schemes == ("ipc",)
    assert rows[(T, "ipc")][0].spec.priority == 20
    assert rows[(T, "tcp")][0].spec.capabilities == {"same-host", "multi-host"}  # "local" of API 1.1 is same-host
    assert rows[(R, "shm")][0].spec.priority == 5
    # core has no allocator of its own: `local` comes with tetrarch-alloc-local (a dependency), by entry point
    assert not [r for r in registry.statuses(A) if r.distribution == "tetrarch"]
    (local,) = rows[(A, "local")]
    assert (local.distribution, local.status) == ("tetrarch-alloc-local", Status.NOT_INSTALLED)


def test_builtin_probes_are_truthful() -> None:
    import importlib.util

    rows = rows_by_key(Registry(entry_points=False))
    for key, module in [((T, "tcp"), "tetrarch._transport._socket"), ((R, "tcp"), "tetrarch._rdma._tcp"),
                        ((R, "shm"), "tetrarch._rdma._shm")]:  # core declares its RDMA backends before writing them
        row = rows[key][0]
        try:
            present = importlib.util.find_spec(module) is not None
        except ImportError:
            present = False
        if present:
            assert row.status is Status.AVAILABLE, row
        else:
            assert row.status is Status.NOT_IMPLEMENTED
            assert row.reason.startswith(f"the {key[1]} RDMA backend is not implemented yet")


def test_statuses_sorted_and_filtered() -> None:
    registry = get_registry()
    rows = registry.statuses()
    assert rows == sorted(rows, key=lambda r: (r.kind.value, r.name, r.distribution))
    assert all(r.kind is T for r in registry.statuses(T))
    assert registry.statuses() is not registry.statuses()  # callers get their own list


def test_not_installed_rows_for_known_backends_without_entry_points() -> None:
    rows = rows_by_key(Registry(entry_points=False))
    for (kind, name), known in KNOWN_BACKENDS.items():
        (row,) = rows[(kind, name)]
        assert row.distribution == known.distribution
        if known.implemented:
            assert row.status is Status.NOT_INSTALLED
            # a distribution core depends on is named itself: `tetrarch[local]` over an installed tetrarch says less
            expected = f"pip install {known.distribution}" if known.core_dependency else \
                f'pip install "tetrarch[{known.extra}]"'
            assert row.hint == expected
        else:  # never "install it" for what cannot run once installed
            assert row.status is Status.NOT_IMPLEMENTED
            assert row.reason.startswith(f"the {name} ")
            assert row.reason.endswith(f"is not implemented yet (also: {known.distribution} is not installed)")
            assert "pip install" not in row.hint


def test_probe_that_raises_is_unavailable_not_fatal(fakes, make_registry) -> None:
    def boom() -> ProbeResult:
        raise OSError("probe exploded")

    bad = BackendSpec(T, "bad", "types:SimpleNamespace", probe=boom)
    weird = BackendSpec(T, "weird", "types:SimpleNamespace", probe=lambda: True)  # type: ignore[arg-type,return-value]
    registry = make_registry(fakes.source("fake-dist", bad, weird, fakes.spec(T, "good")))
    rows = rows_by_key(registry)
    assert rows[(T, "bad")][0].status is Status.UNAVAILABLE
    assert "OSError: probe exploded" in rows[(T, "bad")][0].reason
    assert rows[(T, "weird")][0].status is Status.UNAVAILABLE
    assert rows[(T, "good")][0].status is Status.AVAILABLE


def test_probes_run_once(fakes, make_registry) -> None:
    calls = []

    def probe() -> ProbeResult:
        calls.append(1)
        return ProbeResult.yes()

    registry = make_registry(fakes.source("fake-dist", BackendSpec(T, "x", "types:SimpleNamespace", probe=probe)))
    registry.statuses()
    registry.statuses()
    registry.select(T, "x")
    assert calls == [1]


def test_plugin_whose_hook_raises_is_broken_and_others_load(fakes, make_registry) -> None:
    def explode() -> list[BackendSpec]:
        raise ValueError("hook exploded")

    bad = types.SimpleNamespace(tetrarch_transports=hookimpl(explode))
    registry = make_registry(PluginSource(bad, "bad", "bad-dist", "2.0"),
                             fakes.source("good-dist", fakes.spec(T, "good")))
    records = {p.name: p for p in registry.plugins()}
    assert records["bad"].state is PluginState.BROKEN
    assert "hook exploded" in records["bad"].reason
    assert "ValueError" in records["bad"].traceback
    assert records["fake"].state is PluginState.LOADED
    assert registry.select(T, "good").name == "good"
    assert not registry.plugin_manager.is_registered(bad)  # a broken plugin's hooks never run


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (["not a spec"], "not a tetrarch.plugins.TransportSpec"),
        ([BackendSpec(R, "r", "a:b")], "expected kind transport"),
        ([BackendSpec(T, "zmq+tcp", "a:b")], "invalid backend name"),
        ([BackendSpec(T, "x", "no_colon")], "not a 'package.module:Name' string"),
    ],
)
def test_invalid_specs_make_the_plugin_broken(make_registry, returned: list, message: str) -> None:
    bad = types.SimpleNamespace(tetrarch_transports=hookimpl(lambda: returned))
    registry = make_registry(PluginSource(bad, "bad", "bad-dist"))
    (record,) = [p for p in registry.plugins() if p.name == "bad"]
    assert record.state is PluginState.BROKEN
    assert message in record.reason


def test_misspelt_hook_is_reported(make_registry) -> None:
    bad = types.SimpleNamespace(tetrarch_transport=hookimpl(lambda: []))  # noqa: PIE807 - pluggy marks the function
    registry = make_registry(PluginSource(bad, "typo", "typo-dist"))
    (record,) = [p for p in registry.plugins() if p.name == "typo"]
    assert record.state is PluginState.BROKEN
    assert "unknown hook 'tetrarch_transport'" in record.reason


def test_conflict_marks_both_rows_and_names_both_distributions(fakes, make_registry) -> None:
    registry = make_registry(
        fakes.source("dist-a", fakes.spec(T, "same"), version="1.0"),
        fakes.source("dist-b", fakes.spec(T, "same"), version="2.0"),
    )
    rows = rows_by_key(registry)[(T, "same")]
    assert [r.status for r in rows] == [Status.CONFLICT, Status.CONFLICT]
    assert {r.distribution for r in rows} == {"dist-a", "dist-b"}
    for row in rows:
        assert "dist-a 1.0" in row.reason and "dist-b 2.0" in row.reason
        assert "TETRARCH_DISABLE_PLUGINS=dist-a" in row.hint
        assert "TETRARCH_DISABLE_PLUGINS=dist-b" in row.hint


def test_conflict_with_a_builtin_hints_at_blocking_the_plugin(fakes, make_registry) -> None:
    registry = make_registry(fakes.source("dist-x", fakes.spec(T, "tcp", schemes=("tcp",))), builtins=True)
    rows = rows_by_key(registry)[(T, "tcp")]
    assert {r.status for r in rows} == {Status.CONFLICT}
    assert {r.distribution for r in rows} == {"tetrarch", "dist-x"}
    assert "TETRARCH_DISABLE_PLUGINS=dist-x" in rows[0].hint
    assert "TETRARCH_DISABLE_PLUGINS=tetrarch" not in rows[0].hint


def test_disable_by_distribution_or_entry_point_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_DISABLE_PLUGINS", "tetrarch_transport_zmq, nng")
    registry = Registry()
    rows = rows_by_key(registry)
    for name, dist in [("zmq", "tetrarch-transport-zmq"), ("nng", "tetrarch-transport-nng")]:
        (row,) = rows[(T, name)]
        assert row.status is Status.DISABLED
        assert row.reason == "disabled by TETRARCH_DISABLE_PLUGINS"
        assert row.distribution == dist
        assert "TETRARCH_DISABLE_PLUGINS" in row.hint
    states = {p.distribution: p.state for p in registry.plugins()}
    assert states["tetrarch-transport-zmq"] is PluginState.DISABLED
    assert states["tetrarch-alloc-slurm"] is PluginState.LOADED


def test_disable_applies_to_injected_plugins_but_never_core(fakes, monkeypatch: pytest.MonkeyPatch,
                                                            make_registry) -> None:
    monkeypatch.setenv("TETRARCH_DISABLE_PLUGINS", "fake-dist,tetrarch")
    registry = make_registry(fakes.source("fake-dist", fakes.spec(T, "x")), builtins=True)
    states = {(p.distribution, p.name): p.state for p in registry.plugins()}
    assert states[("fake-dist", "fake")] is PluginState.DISABLED
    assert states[("tetrarch", "builtin")] is PluginState.LOADED
    assert not [r for r in registry.statuses() if r.name == "x"]


def test_strict_mode_raises_naming_the_plugin(monkeypatch: pytest.MonkeyPatch, make_registry) -> None:
    bad = types.SimpleNamespace(tetrarch_allocators=hookimpl(lambda: 1 / 0))
    make_registry(PluginSource(bad, "bad", "bad-dist"))  # lenient by default
    monkeypatch.setenv("TETRARCH_PLUGINS_STRICT", "1")
    with pytest.raises(PluginLoadError, match="'bad' from bad-dist") as info:
        make_registry(PluginSource(bad, "bad", "bad-dist"))
    assert info.value.plugin == "bad" and info.value.distribution == "bad-dist"
    assert "ZeroDivisionError" in info.value.traceback
    monkeypatch.setenv("TETRARCH_PLUGINS_STRICT", "0")
    make_registry(PluginSource(bad, "bad", "bad-dist"))


def test_entry_points_load_one_by_one() -> None:
    import pluggy

    from tetrarch._plugins import _hookspecs

    pm = pluggy.PluginManager("tetrarch")
    pm.add_hookspecs(_hookspecs)
    eps = [
        importlib.metadata.EntryPoint("missing", "tetrarch_no_such_module_xyz", "tetrarch"),
        *importlib.metadata.entry_points(group="tetrarch", name="slurm"),  # as tetrarch-alloc-slurm declares it
    ]
    records = load_entry_points(pm, disabled=frozenset(), strict=False, entry_points=lambda: eps)
    by_name = {r.name: r for r in records}
    assert by_name["missing"].state is PluginState.BROKEN
    assert "ModuleNotFoundError" in by_name["missing"].reason
    assert by_name["slurm"].state is PluginState.LOADED
    assert [s.name for s in by_name["slurm"].specs] == ["slurm"]
    strict_pm = pluggy.PluginManager("tetrarch")
    strict_pm.add_hookspecs(_hookspecs)
    with pytest.raises(PluginLoadError, match="'missing'"):
        load_entry_points(strict_pm, disabled=frozenset(), strict=True, entry_points=lambda: eps)


def test_get_registry_is_a_thread_safe_singleton() -> None:
    seen: list[Registry] = []
    barrier = threading.Barrier(8, timeout=scaled(10))

    def grab() -> None:
        barrier.wait()
        seen.append(get_registry())

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(scaled(10))
        assert not t.is_alive()
    assert len(seen) == 8 and len({id(r) for r in seen}) == 1
    reset_registry()
    assert get_registry() is not seen[0]


def test_fake_plugin_helper_roundtrip(fakes, make_registry) -> None:
    registry = make_registry(fakes.source("fake-dist", fakes.spec(A, "a1"), fakes.spec(R, "r1"), fakes.spec(T, "t1")))
    names = {(r.kind, r.name) for r in registry.statuses() if r.distribution == "fake-dist"}
    assert names == {(A, "a1"), (R, "r1"), (T, "t1")}
    assert fakes.plugin() is not None
