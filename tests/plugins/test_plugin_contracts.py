"""Typed contracts per kind (plugin API 1.2): one spec type per kind, capabilities as an enum,
a frozen selection request, errors whose facts are fields, and every hook's docstring a
complete plugin that loads.

Plugins written for plugin API 1.1 (``BackendSpec(kind, ...)``, the capability ``"local"``,
a select hook that reads its request as a mapping) keep loading and working.
"""

from __future__ import annotations

import dataclasses
import re
import types
import warnings

import pytest

from tetrarch import plugins as api
from tetrarch.plugins import (
    PLUGIN_API_VERSION,
    AllocatorSpec,
    BackendKind,
    BackendNotFound,
    BackendSpec,
    BackendUnavailable,
    Capability,
    PluginSource,
    PluginState,
    RdmaBackendSpec,
    Registry,
    SelectionRequest,
    Status,
    TransportSpec,
    hookimpl,
)
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

T, R, A = BackendKind.TRANSPORT, BackendKind.RDMA, BackendKind.ALLOCATOR
SPEC_TYPE = {T: TransportSpec, R: RdmaBackendSpec, A: AllocatorSpec}
SAME, MULTI = Capability.SAME_HOST, Capability.MULTI_HOST


def test_the_api_version_grew_compatibly_to_1_2() -> None:
    assert PLUGIN_API_VERSION == "1.2"


# ------------------------------------------------------------------ one spec type per kind


def test_every_first_party_and_builtin_backend_declares_its_kinds_spec_type() -> None:
    rows = [r for r in Registry().statuses() if r.distribution.startswith("tetrarch") and r.spec is not None]
    assert {(r.kind, r.name) for r in rows} >= {(T, "ipc"), (T, "tcp"), (T, "zmq"), (T, "nng"), (R, "tcp"),
                                                (R, "shm"), (R, "verbs"), (R, "efa"), (A, "local"), (A, "slurm")}
    for row in rows:
        assert type(row.spec) is SPEC_TYPE[row.kind], (row.kind, row.name, type(row.spec))
        assert row.spec.kind is row.kind
        assert row.spec.capabilities and all(type(c) is Capability for c in row.spec.capabilities), row
        if row.kind is T:
            assert set(row.spec.schemes) <= {"tcp", "ipc"} and row.spec.schemes, row  # bare schemes only
        else:
            assert row.spec.schemes == ()


def test_per_kind_specs_take_only_their_kinds_fields() -> None:
    t = TransportSpec("foo", "pkg.mod:Foo", schemes=("tcp",), capabilities=frozenset({SAME, MULTI}))
    assert (t.kind, t.schemes, t.capabilities) == (T, ("tcp",), {SAME, MULTI})
    assert isinstance(t, BackendSpec) and dataclasses.is_dataclass(t)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.priority = 3  # type: ignore[misc]
    for spec_type in (RdmaBackendSpec, AllocatorSpec):
        with pytest.raises(TypeError, match="schemes"):
            spec_type("foo", "pkg.mod:Foo", schemes=("tcp",))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes no kind: its kind is its type"):
        TransportSpec(T, "foo", "pkg.mod:Foo")  # type: ignore[arg-type]
    assert RdmaBackendSpec("foo", "pkg.mod:Foo").kind is R and AllocatorSpec("foo", "pkg.mod:Foo").kind is A


@pytest.mark.parametrize("scheme", ["zmq+tcp", "tcp://", "TCP", ""])
def test_a_transport_scheme_is_a_bare_address_scheme(scheme: str) -> None:
    with pytest.raises(ValueError, match="no bare address scheme"):
        TransportSpec("zmq", "pkg.mod:Zmq", schemes=(scheme,))


def test_capabilities_are_one_enum_and_the_legacy_local_means_same_host() -> None:
    assert [c.value for c in Capability] == ["same-host", "multi-host"]
    assert f"{SAME}" == "same-host" and SAME == "same-host"
    spec = TransportSpec("foo", "pkg.mod:Foo", schemes=("tcp",), capabilities=frozenset({"local", "multi-host"}))
    assert spec.capabilities == {SAME, MULTI} and all(type(c) is Capability for c in spec.capabilities)
    assert SelectionRequest(T, require={"local"}).require == {SAME}
    # a plugin's own tag is kept as given (matched exactly)
    assert AllocatorSpec("foo", "pkg.mod:Foo", capabilities=frozenset({"gpu-direct"})).capabilities == {"gpu-direct"}
    with pytest.raises(TypeError):
        AllocatorSpec("foo", "pkg.mod:Foo", capabilities=frozenset({1}))  # type: ignore[arg-type]


# ------------------------------------------------------------------ a plugin written for plugin API 1.1


def _legacy_plugin(seen: list[object]) -> types.SimpleNamespace:
    """A 1.1 plugin: ``BackendSpec(kind, ...)``, ``"local"``, a select hook reading its request as a mapping."""

    def transports() -> list[BackendSpec]:
        return [BackendSpec(T, "old", "types:SimpleNamespace", priority=50, schemes=("tcp",),
                            capabilities=frozenset({"local"})),
                BackendSpec(T, "wide", "types:SimpleNamespace", schemes=("tcp",),
                            capabilities=frozenset({"local", "multi-host"}))]

    def select(kind: BackendKind, candidates: list[BackendSpec], request: dict[str, object]) -> BackendSpec | None:
        require = request.get("require") or set()
        seen.append((require, "allow_fallback" in request))
        return next((c for c in candidates if set(require) <= c.capabilities), None)

    return types.SimpleNamespace(tetrarch_plugin_api="1.1", tetrarch_transports=hookimpl(transports),
                                 tetrarch_select_backend=hookimpl(select))


def test_a_plugin_written_for_1_1_loads_and_selects_as_before(make_registry) -> None:
    seen: list[object] = []
    registry = make_registry(PluginSource(_legacy_plugin(seen), "old", "old-dist", "1.0"))
    (record,) = registry.plugins()[-1:]
    assert (record.distribution, record.state, record.api) == ("old-dist", PluginState.LOADED, "1.1")
    row = registry.status(T, "old")
    assert row.status is Status.AVAILABLE and type(row.spec) is BackendSpec
    assert row.spec.capabilities == {SAME} and registry.status(T, "wide").spec.capabilities == {SAME, MULTI}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert registry.select(T).name == "old"
        assert registry.select(T, request={"require": {"multi-host"}}).name == "wide"  # a mapping, as in 1.1
        assert registry.select(T, request=SelectionRequest(T, require={MULTI}, allow_fallback=False)).name == "wide"
    assert caught and all(w.category is DeprecationWarning and "deprecated since plugin API 1.2" in str(w.message)
                          for w in caught)
    assert seen == [(set(), False), ({MULTI}, False), ({MULTI}, True)]


# ------------------------------------------------------------------ the selection request


def test_a_select_hook_gets_a_frozen_selection_request(make_registry, fakes) -> None:
    seen: list[SelectionRequest] = []

    class Policy:
        @hookimpl
        def tetrarch_select_backend(self, kind, candidates, request):
            seen.append(request)
            return None

    registry = make_registry(fakes.source("d", fakes.spec(T, "a", schemes=("tcp",), capabilities={"same-host"}),
                                          fakes.spec(A, "b", capabilities={MULTI})))
    registry.plugin_manager.register(Policy(), name="policy")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # reading fields is no deprecated use
        assert registry.select(T, address="a+tcp://h:1").name == "a"  # named by the address: no hook asked
        assert seen == []
        assert registry.select(T, address="tcp://h:1", request=SelectionRequest(T, require={SAME})).name == "a"
        assert registry.select(A, request={"meshes": {"trainers": 2}}).name == "b"
    transport, allocator = seen
    assert transport == SelectionRequest(T, require=frozenset({SAME}), scheme="tcp")
    assert (allocator.kind, dict(allocator.meshes), allocator.require) == (A, {"trainers": 2}, frozenset())
    with pytest.raises(dataclasses.FrozenInstanceError):
        transport.require = frozenset()  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"\['requires'\] are no SelectionRequest fields"):
        registry.select(T, request={"requires": {"same-host"}})
    with pytest.raises(ValueError, match="a request for a allocator backend cannot select a transport one"):
        registry.select(T, request=SelectionRequest(A))
    with pytest.raises(ValueError, match="address 'ipc://x' is of scheme 'ipc' but the request's is 'tcp'"):
        registry.select(T, address="ipc://x", request=SelectionRequest(T, scheme="tcp"))
    for kind, scheme in ((A, "tcp"), (T, "zmq+tcp")):
        with pytest.raises(ValueError, match="only a transport's request has one, a bare address scheme"):
            SelectionRequest(kind, scheme=scheme)


# ------------------------------------------------------------------ errors carry kind, name, reason, remedy


def test_an_unknown_backend_is_not_found_with_its_facts(make_registry, fakes) -> None:
    registry = make_registry(fakes.source("d", fakes.spec(T, "a", schemes=("tcp",))))
    with pytest.raises(BackendNotFound) as caught:
        registry.select(T, "nosuch")
    err = caught.value
    assert (err.kind, err.name) == (T, "nosuch")
    assert err.reason == "no installed plugin provides a transport named 'nosuch'"
    assert err.remedy == "install the plugin that provides it, or choose an available transport (a)"


def test_a_first_party_backend_not_installed_names_its_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = Registry(entry_points=False)  # core alone: no plugin distribution is seen
    with pytest.raises(BackendNotFound, match=r'pip install "tetrarch\[zmq\]"') as caught:
        registry.select(T, "zmq")
    err = caught.value
    assert (err.kind, err.name, err.reason, err.remedy) == (T, "zmq", "tetrarch-transport-zmq is not installed",
                                                            'pip install "tetrarch[zmq]"')
    row = registry.status(T, "zmq")
    assert row.status is Status.NOT_INSTALLED and row.remedy == row.hint == 'pip install "tetrarch[zmq]"'


def test_an_unavailable_backend_says_why_and_what_to_do(make_registry, fakes) -> None:
    registry = make_registry(fakes.source("d", fakes.spec(R, "hw", ok=False), fakes.spec(R, "soft")))
    with pytest.raises(BackendUnavailable, match="fix hw") as caught:
        registry.select(R, "hw")
    err = caught.value
    assert (err.kind, err.name, err.reason, err.remedy) == (R, "hw", "unavailable: fake hw cannot run", "fix hw")
    row = registry.status(R, "hw")
    assert (row.reason, row.remedy, row.hint) == ("fake hw cannot run", "fix hw", "fix hw")  # hint: deprecated alias
    with pytest.raises(BackendUnavailable) as caught:
        make_registry(fakes.source("d", fakes.spec(A, "x", ok=False))).select(A)
    assert (caught.value.kind, caught.value.name) == (A, None) and caught.value.remedy.startswith("x: fix x")


# ------------------------------------------------------------------ each hook's docstring is a working plugin


def _example(hook: str) -> str:
    """The ``.. code-block:: python`` of the hookspec ``hook``'s docstring, dedented."""
    from tetrarch._plugins import _hookspecs

    doc = getattr(_hookspecs, hook).__doc__
    block = doc.split(".. code-block:: python", 1)[1]
    lines = block.splitlines()[1:]
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines)


@pytest.mark.parametrize("hook", ["tetrarch_transports", "tetrarch_rdma_backends", "tetrarch_allocators",
                                  "tetrarch_select_backend", "tetrarch_settings"])
def test_each_hooks_docstring_holds_a_complete_plugin_that_loads(hook: str) -> None:
    module = types.ModuleType(f"example_{hook}")
    exec(compile(_example(hook), module.__name__, "exec"), module.__dict__)  # our own docstring
    assert module.tetrarch_plugin_api == PLUGIN_API_VERSION
    registry = Registry(plugins=[PluginSource(module, "example", "example-dist", "0.1")], entry_points=False)
    (record,) = [p for p in registry.plugins() if p.distribution == "example-dist"]
    assert (record.state, record.api) == (PluginState.LOADED, PLUGIN_API_VERSION), record.reason
    kind = {"tetrarch_transports": T, "tetrarch_rdma_backends": R, "tetrarch_allocators": A}.get(hook)
    if kind is not None:
        (spec,) = record.specs
        assert type(spec) is SPEC_TYPE[kind] and spec.name == "foo"
        assert registry.status(kind, "foo").status in (Status.AVAILABLE, Status.UNAVAILABLE)
    if hook == "tetrarch_select_backend":
        sandbox = AllocatorSpec("sandbox", "types:SimpleNamespace", capabilities=frozenset({SAME}))
        other = AllocatorSpec("other", "types:SimpleNamespace", priority=9, capabilities=frozenset({SAME}))
        assert module.tetrarch_select_backend(A, [other, sandbox], SelectionRequest(A)) is sandbox
        assert module.tetrarch_select_backend(A, [other, sandbox], SelectionRequest(A, require={MULTI})) is None
        assert module.tetrarch_select_backend(T, [other, sandbox], SelectionRequest(T)) is None
    if hook == "tetrarch_settings":
        assert [s.key for s in record.settings] == ["foo_depth"]


def test_the_new_names_are_public() -> None:
    for name in ("Capability", "TransportSpec", "RdmaBackendSpec", "AllocatorSpec", "SelectionRequest"):
        assert name in api.__all__ and getattr(api, name) is globals()[name]
    assert re.fullmatch(r"\d+\.\d+", PLUGIN_API_VERSION)
