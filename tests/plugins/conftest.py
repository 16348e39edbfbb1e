"""Fixtures for the plugin-layer tests: a clean environment and fake plugins.

Test modules do not import each other (``--import-mode=importlib``), so the helpers
that build fake plugins come as the ``fakes`` fixture.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tetrarch._config import SETTINGS, configure
from tetrarch._plugins import PluginSource, Registry, reset_registry
from tetrarch.plugins import BackendKind, BackendSpec, ProbeResult, hookimpl
from tetrarch.testing import scaled

#: The plugin layer's settings (tetrarch._config).
_KEYS = ("transport", "rdma_backend", "allocator", "disable_plugins", "plugins_strict", "rdma_fallback")
_HOOK_BY_KIND = {
    BackendKind.TRANSPORT: "tetrarch_transports",
    BackendKind.RDMA: "tetrarch_rdma_backends",
    BackendKind.ALLOCATOR: "tetrarch_allocators",
}


@pytest.fixture(autouse=True)
def clean_plugin_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No plugin switches from the outer environment or from code; a fresh process registry."""
    for key in _KEYS:
        monkeypatch.delenv(SETTINGS[key].env, raising=False)
    unset = dict.fromkeys(_KEYS)
    configure(**unset)
    reset_registry()
    yield
    configure(**unset)
    reset_registry()


def _fake_plugin(*specs: BackendSpec) -> object:
    """A plugin object whose hooks return ``specs`` (grouped by kind)."""
    plugin = types.SimpleNamespace()
    for kind, hook in _HOOK_BY_KIND.items():
        mine = [s for s in specs if s.kind is kind]
        if mine:
            setattr(plugin, hook, hookimpl(lambda mine=mine: list(mine)))
    return plugin


def _spec(
    kind: BackendKind,
    name: str,
    *,
    ok: bool = True,
    priority: int = 0,
    schemes: tuple[str, ...] = (),
    capabilities: frozenset[str] | set[str] = frozenset(),
    factory: str = "types:SimpleNamespace",
    on_request: bool = False,
) -> BackendSpec:
    """A backend spec whose probe answers ``ok`` (``on_request``: available only when chosen) and whose
    factory is importable."""
    result = (ProbeResult.yes("fake ok", on_request=on_request) if ok
              else ProbeResult.no(f"fake {name} cannot run", f"fix {name}"))
    return BackendSpec(
        kind, name, factory, probe=lambda: result, priority=priority, schemes=schemes,
        capabilities=frozenset(capabilities),
    )


def _source(distribution: str, *specs: BackendSpec, name: str = "fake", version: str = "1.0") -> PluginSource:
    """``specs`` as if the distribution ``distribution`` declared them."""
    return PluginSource(_fake_plugin(*specs), name, distribution, version)


@pytest.fixture
def fakes() -> types.SimpleNamespace:
    """``fakes.plugin(*specs)``, ``fakes.spec(kind, name, ...)``, ``fakes.source(dist, *specs)``."""
    return types.SimpleNamespace(plugin=_fake_plugin, spec=_spec, source=_source)


@pytest.fixture
def make_registry() -> Callable[..., Registry]:
    """A registry of the given fake plugins; no builtins or entry points unless asked."""

    def make(*sources: PluginSource, builtins: bool = False, entry_points: bool = False) -> Registry:
        return Registry(plugins=sources, builtins=builtins, entry_points=entry_points)

    return make


# ------------------------------------------------------------------ installed throwaway distributions


def _pip_install_target(project: Path, site: Path) -> None:
    """``pip install`` the distribution in ``project`` into the folder ``site`` (no index, no dependencies).

    A folder put on ``PYTHONPATH`` then holds the package and its ``.dist-info`` (with its
    ``entry_points.txt``), as in an environment where the user installed it; the venv stays clean.
    """
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--target", str(site), str(project)],
        capture_output=True, text=True, timeout=scaled(110), cwd=project,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _install_module_plugin(tmp_path_factory: pytest.TempPathFactory, name: str, version: str, entry: str,
                           source: str) -> Path:
    """A folder holding the installed one-module distribution ``name`` ``version``, whose module
    (``name`` with underscores, entry point ``entry``) has ``source`` (dedented)."""
    module = name.replace("-", "_")
    project = tmp_path_factory.mktemp(f"{entry}-project")
    (project / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{name}"
        version = "{version}"

        [project.entry-points.tetrarch]
        {entry} = "{module}"

        [tool.setuptools]
        py-modules = ["{module}"]
    """))
    (project / f"{module}.py").write_text(textwrap.dedent(source))
    site = tmp_path_factory.mktemp(f"{entry}-site")
    _pip_install_target(project, site)
    assert list(site.glob(f"{module}-{version}.dist-info")), f"{name} was not installed into {site}"
    return site


@pytest.fixture(scope="session")
def install_module_plugin() -> Callable[..., Path]:
    """``install_module_plugin(tmp_path_factory, name, version, entry, source) -> site``: a one-module
    plugin distribution installed into a fresh folder (put it on ``PYTHONPATH``)."""
    return _install_module_plugin


@pytest.fixture(scope="session")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the installed distribution ``tetrarch-test-broken`` 9.9.9, whose plugin
    module (entry point ``kaboom``) raises ``RuntimeError("tetrarch-test-broken exploded on import")``."""
    return _install_module_plugin(tmp_path_factory, "tetrarch-test-broken", "9.9.9", "kaboom",
                                  'raise RuntimeError("tetrarch-test-broken exploded on import")\n')


#: The copyable plugin template: distribution ``tetrarch-plugin-template`` 0.1.0, entry point ``template``.
TEMPLATE = Path(__file__).resolve().parents[2] / "examples" / "plugin_template"


@pytest.fixture(scope="session")
def template_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the installed plugin template (built from a copy: the source folder stays clean)."""
    project = tmp_path_factory.mktemp("template-project") / "plugin_template"
    shutil.copytree(TEMPLATE, project,
                    ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"))
    site = tmp_path_factory.mktemp("template-site")
    _pip_install_target(project, site)
    entry_points = site / "tetrarch_plugin_template-0.1.0.dist-info" / "entry_points.txt"
    assert "template = tetrarch_plugin_template._plugin" in entry_points.read_text()
    return site
