"""Settings a plugin declares (hook ``tetrarch_settings``): listed under the plugin, set like core's, passed on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tetrarch._cli import config_rows, main
from tetrarch._config import config_env, configure, configured, known_settings
from tetrarch._config_doc import markdown_tables
from tetrarch._config_plugins import FIRST_PARTY_SETTINGS, plugin_settings, settings_by_owner
from tetrarch._plugins import PluginSource, PluginState, Registry, _registry
from tetrarch.plugins import Setting, hookimpl, setting

pytestmark = pytest.mark.timeout(60)

FOO_DEPTH: Setting[int] = Setting("foo_depth", "TETRARCH_FOO_DEPTH", int, 4, "requests foo keeps in flight",
                                  probed=True)
FOO_SECRET: Setting[str | None] = Setting("foo_secret", "TETRARCH_FOO_SECRET", str, None, "stays here",
                                          propagate=False)


class FooPlugin:
    """A third-party plugin with two settings and no backend."""

    tetrarch_plugin_api = "1.0"

    @hookimpl
    def tetrarch_settings(self) -> list[Setting[Any]]:
        return [FOO_DEPTH, FOO_SECRET]


class GreedyPlugin:
    """A plugin that declares a key core owns: broken."""

    tetrarch_plugin_api = "1.0"

    @hookimpl
    def tetrarch_settings(self) -> list[Setting[Any]]:
        return [Setting("stop_timeout", "TETRARCH_STOP_TIMEOUT", float, 1.0, "mine")]


@pytest.fixture
def foo(monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    """A process registry holding only core's builtins and ``FooPlugin`` (distribution tetrarch-foo)."""
    for s in (FOO_DEPTH, FOO_SECRET):
        monkeypatch.delenv(s.env, raising=False)
    registry = Registry(plugins=[PluginSource(FooPlugin(), "foo", "tetrarch-foo", "1.0")], entry_points=False)
    monkeypatch.setattr(_registry, "_registry", registry)
    yield registry
    configure(foo_depth=None, foo_secret=None)


def test_a_plugin_setting_is_listed_under_its_plugin(foo: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    assert [r.settings for r in foo.plugins() if r.distribution == "tetrarch-foo"] == [(FOO_DEPTH, FOO_SECRET)]
    assert settings_by_owner() == {"tetrarch-foo": [FOO_DEPTH, FOO_SECRET]}
    configure(foo_depth=9)
    assert main(["config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("plugin tetrarch-foo:")
    assert lines[at + 1].split()[:4] == ["foo_depth", "TETRARCH_FOO_DEPTH", "9", "code"]
    assert lines[at + 2].split()[:4] == ["foo_secret", "TETRARCH_FOO_SECRET", "(auto)", "default"]
    rows = {r["key"]: r for r in config_rows()}
    assert (rows["foo_depth"]["owner"], rows["foo_depth"]["value"]) == ("tetrarch-foo", 9)


def test_configure_sets_it_and_config_env_passes_it_on(foo: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    assert FOO_DEPTH() == 4 and "foo_depth" in known_settings()
    with configured(foo_depth="12", foo_secret="x") as config:
        assert (FOO_DEPTH(), FOO_DEPTH.source(), config["foo_depth"]) == (12, "code", 12)
        env = config_env()
        assert env["TETRARCH_FOO_DEPTH"] == "12" and "TETRARCH_FOO_SECRET" not in env  # propagate=False
    assert FOO_DEPTH.source() == "default" and "TETRARCH_FOO_DEPTH" not in config_env()
    monkeypatch.setenv("TETRARCH_FOO_DEPTH", "5")
    assert (FOO_DEPTH(), config_env()["TETRARCH_FOO_DEPTH"]) == (5, "5")
    assert setting("foo_depth") is FOO_DEPTH
    with pytest.raises(TypeError, match="expected an integer"):
        configure(foo_depth=1.5)


def test_an_absent_first_party_plugin_is_named(foo: Registry) -> None:
    """Without tetrarch-rdma-efa (this registry has no entry points), its setting is unknown and the error
    says which plugin declares it."""
    with pytest.raises(TypeError, match=r"efa_provider \(declared by the plugin tetrarch-rdma-efa, which is not "
                                        r"installed or not loaded: pip install \"tetrarch\[efa\]\"\)"):
        configure(efa_provider="shm")
    with pytest.raises(TypeError, match="did you mean foo_depth"):
        configure(foo_deph=1)
    with pytest.raises(ValueError, match="declared by the plugin tetrarch-rdma-verbs"):
        setting("rdma_device")


def test_a_plugin_cannot_declare_a_core_setting() -> None:
    registry = Registry(plugins=[PluginSource(GreedyPlugin(), "greedy", "tetrarch-greedy", "1.0")],
                        entry_points=False)
    (record,) = [r for r in registry.plugins() if r.distribution == "tetrarch-greedy"]
    assert record.state is PluginState.BROKEN and "'stop_timeout'" in record.reason


def test_first_party_plugins_declare_what_core_says_they_do() -> None:
    """FIRST_PARTY_SETTINGS (for the error above) agrees with the installed first-party plugins, and the
    generated docs carry a section per such plugin."""
    declared = {key: owner.replace("_", "-").lower() for key, (owner, _) in plugin_settings().items()
                if owner.replace("_", "-").lower().startswith("tetrarch-")}
    installed = set(declared.values())
    expected = {k: d for k, (d, _) in FIRST_PARTY_SETTINGS.items() if d in installed}
    assert declared == expected
    for dist in installed:
        assert f"### Settings of the `{dist}` plugin" in markdown_tables()
