"""The plugin API version: a plugin written for another one is listed ``incompatible`` and never loaded.

The rule (``tetrarch._plugins._api``): a plugin's ``tetrarch_plugin_api`` must have this
tetrarch's MAJOR and a MINOR no newer; a plugin that declares none is taken as ``"1.0"``
(it loads under 1.x, with a note, and strict mode refuses it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tetrarch._cli import plugin_rows
from tetrarch.plugins import (
    PLUGIN_API_VERSION,
    BackendKind,
    BackendNotFound,
    BackendSpec,
    BackendUnavailable,
    PluginLoadError,
    PluginSource,
    PluginState,
    Registry,
    Status,
    hookimpl,
)
from tetrarch.testing import scaled

T, A = BackendKind.TRANSPORT, BackendKind.ALLOCATOR
MAJOR, MINOR = (int(n) for n in PLUGIN_API_VERSION.split("."))
NEXT_MAJOR = f"{MAJOR + 1}.0"


def _untouchable(api: str | None) -> types.SimpleNamespace:
    """A plugin declaring ``api`` whose hooks fail the test if anyone calls them."""

    def called() -> list[object]:
        raise AssertionError("the hooks of an incompatible plugin were called")

    plugin = types.SimpleNamespace(tetrarch_transports=hookimpl(called), tetrarch_allocators=hookimpl(called))
    if api is not None:
        plugin.tetrarch_plugin_api = api
    return plugin


def _declaring(source: PluginSource, api: str | None) -> PluginSource:
    if api is not None:
        source.plugin.tetrarch_plugin_api = api  # type: ignore[attr-defined]
    return source


@pytest.mark.parametrize(("api", "fix"), [
    (NEXT_MAJOR, "upgrade tetrarch to a release with plugin API"),  # written for a newer tetrarch
    (f"{MAJOR}.{MINOR + 1}", "upgrade tetrarch to a release with plugin API"),  # uses names this one lacks
    (f"{MAJOR - 1}.9", "upgrade future-dist to a release written for plugin API"),  # an older MAJOR
])
def test_an_incompatible_plugin_is_listed_with_both_versions_and_the_fix_and_the_rest_works(
    make_registry, fakes, api: str, fix: str
) -> None:
    registry = make_registry(
        PluginSource(_untouchable(api), "future", "future-dist", "3.1"),
        _declaring(fakes.source("good-dist", fakes.spec(T, "good", schemes=("tcp",))), PLUGIN_API_VERSION),
        builtins=True,
    )
    (record,) = [p for p in registry.plugins() if p.distribution == "future-dist"]
    assert record.state is PluginState.INCOMPATIBLE and record.specs == ()
    assert f"written for plugin API {api}; this tetrarch provides plugin API {PLUGIN_API_VERSION}" == record.reason
    assert record.remedy.startswith(fix) and "TETRARCH_DISABLE_PLUGINS=future-dist" in record.remedy
    assert record.hint == record.remedy  # the deprecated alias
    (row,) = [r for r in plugin_rows(registry) if r["distribution"] == "future-dist"]
    assert (row["kind"], row["backend"], row["status"], row["version"]) == ("plugin", "future", "incompatible", "3.1")
    assert api in row["reason"] and PLUGIN_API_VERSION in row["reason"] and row["hint"] == record.remedy
    # everything else keeps working: the other plugin, core's builtins, selection
    assert registry.status(T, "good").status is Status.AVAILABLE
    assert registry.select(T, "good").name == "good"
    assert registry.select(T, address="ipc://@x").name == "ipc"
    assert registry.select(T, "tcp").name == "tcp"
    # a name it might have provided is not found, and the error says which plugin was not loaded and why
    with pytest.raises(BackendNotFound, match=r"future \(future-dist 3\.1\): incompatible, written for plugin API"):
        registry.select(T, "future")


def test_a_first_party_plugin_for_another_api_makes_its_backends_incompatible(make_registry) -> None:
    registry = make_registry(PluginSource(_untouchable(NEXT_MAJOR), "zmq", "tetrarch-transport-zmq", "9.0"),
                             builtins=True)
    row = registry.status(T, "zmq")
    assert (row.status, row.distribution, row.version) == (Status.INCOMPATIBLE, "tetrarch-transport-zmq", "9.0")
    assert NEXT_MAJOR in row.reason and "upgrade tetrarch" in row.hint
    with pytest.raises(BackendUnavailable, match=r"'zmq' .*is incompatible: written for plugin API .*upgrade"):
        registry.select(T, "zmq")
    assert registry.select(T).name == "ipc"  # nobody asked for zmq: the others serve


@pytest.mark.parametrize("api", [f"{MAJOR}.{m}" for m in range(MINOR)])
def test_a_plugin_for_an_older_minor_loads_and_its_backends_work(make_registry, api: str) -> None:
    """1.0 and 1.1 plugins build ``BackendSpec(kind, ...)`` with the capability ``"local"``: they load under 1.2."""
    spec = BackendSpec(T, "older", "types:SimpleNamespace", schemes=("tcp",), capabilities=frozenset({"local"}))
    plugin = types.SimpleNamespace(tetrarch_plugin_api=api, tetrarch_transports=hookimpl(lambda: [spec]))
    registry = make_registry(PluginSource(plugin, "older", "older-dist", "0.9"), builtins=True)
    (record,) = [p for p in registry.plugins() if p.distribution == "older-dist"]
    assert (record.state, record.api, record.reason) == (PluginState.LOADED, api, "")
    assert registry.status(T, "older").status is Status.AVAILABLE
    assert registry.select(T, address="older+tcp://h:1") is spec
    assert registry.select(T, "older", request={"require": {"local"}}) is spec  # 1.1's request mapping


def test_strict_mode_refuses_an_incompatible_plugin(make_registry) -> None:
    with pytest.raises(PluginLoadError, match=f"'future' from future-dist 3.1 was not loaded .*{NEXT_MAJOR}"):
        Registry(plugins=[PluginSource(_untouchable(NEXT_MAJOR), "future", "future-dist", "3.1")],
                 entry_points=False, builtins=False, strict=True)


@pytest.mark.parametrize("api", [1, "1", "v1.0", "1.0.0", ""])
def test_a_malformed_version_makes_the_plugin_broken(make_registry, api: object) -> None:
    registry = make_registry(PluginSource(_untouchable(api), "odd", "odd-dist"))  # type: ignore[arg-type]
    (record,) = [p for p in registry.plugins() if p.distribution == "odd-dist"]
    assert record.state is PluginState.BROKEN
    assert f"tetrarch_plugin_api = {api!r} is no plugin API version" in record.reason


def test_an_undeclared_plugin_is_taken_as_1_0_with_a_note_and_strict_mode_refuses_it(make_registry, fakes) -> None:
    """No declaration: written before plugins declared versions, against what became 1.0.

    It loads under every 1.x (refusing it would break it for no change of API), the
    listing says it declares nothing, and a plugin's CI (strict mode) must declare one.
    """
    source = fakes.source("old-dist", fakes.spec(A, "old"), name="old")
    registry = make_registry(source)
    (record,) = [p for p in registry.plugins() if p.distribution == "old-dist"]
    assert (record.state, record.api) == (PluginState.LOADED, "")
    assert registry.status(A, "old").status is Status.AVAILABLE
    (row,) = [r for r in plugin_rows(registry) if r["distribution"] == "old-dist"]
    assert "declares no tetrarch_plugin_api, so it is taken as written for plugin API 1.0" in row["hint"]
    with pytest.raises(PluginLoadError, match=r"it declares no tetrarch_plugin_api.*add tetrarch_plugin_api = "):
        Registry(plugins=[source], entry_points=False, builtins=False, strict=True)
    declared = _declaring(fakes.source("new-dist", fakes.spec(A, "new"), name="new"), PLUGIN_API_VERSION)
    (row,) = [r for r in plugin_rows(make_registry(declared)) if r["distribution"] == "new-dist"]
    assert "tetrarch_plugin_api" not in row["hint"]


def test_an_undeclared_plugin_is_incompatible_from_the_next_major() -> None:
    from tetrarch._plugins._api import check_api

    check = check_api(types.SimpleNamespace(), "old-dist", core=NEXT_MAJOR)
    assert not check.ok and "declares no tetrarch_plugin_api: taken as 1.0" in check.reason


def test_every_first_party_plugin_declares_this_version() -> None:
    records = [p for p in Registry().plugins() if p.distribution.startswith("tetrarch-")]
    assert records, "no first-party plugin is installed"
    assert {(p.name, p.state, p.api) for p in records} == {(p.name, PluginState.LOADED, PLUGIN_API_VERSION)
                                                           for p in records}


# ------------------------------------------------------------------ an installed distribution, through the CLI


@pytest.fixture(scope="module")
def future_site(tmp_path_factory: pytest.TempPathFactory, install_module_plugin) -> Path:
    """A folder holding ``tetrarch-test-future`` 5.0.0, whose plugin (entry point ``future``) was
    written for the next MAJOR of the plugin API and whose hook would raise if called."""
    return install_module_plugin(tmp_path_factory, "tetrarch-test-future", "5.0.0", "future", f"""
        from tetrarch.plugins import hookimpl

        tetrarch_plugin_api = "{NEXT_MAJOR}"

        @hookimpl
        def tetrarch_transports(options):  # a hook of an API to come: never called here
            raise AssertionError("called")
    """)


@pytest.mark.isolated
@pytest.mark.timeout(scaled(120))
def test_tetrarch_plugins_lists_an_installed_plugin_for_another_api_as_incompatible(future_site: Path) -> None:
    path = os.pathsep.join(p for p in (str(future_site), os.environ.get("PYTHONPATH", "")) if p)
    result = subprocess.run([sys.executable, "-m", "tetrarch", "plugins", "--json"], capture_output=True, text=True,
                            timeout=scaled(30), env={**os.environ, "PYTHONPATH": path})
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    (row,) = [r for r in rows if r["distribution"] == "tetrarch-test-future"]
    assert (row["kind"], row["backend"], row["status"], row["version"]) == ("plugin", "future", "incompatible",
                                                                            "5.0.0")
    assert f"written for plugin API {NEXT_MAJOR}; this tetrarch provides plugin API {PLUGIN_API_VERSION}" \
        == row["reason"]
    assert row["hint"].startswith(f"upgrade tetrarch to a release with plugin API {NEXT_MAJOR}")
    others = [r for r in rows if r["distribution"] != "tetrarch-test-future"]
    assert others == plugin_rows(Registry())  # every other backend exactly as without it
