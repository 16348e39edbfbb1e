"""The template is a plugin as an installed distribution would be: its entry point, its rows, its factories."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tetrarch_plugin_template._plugin as plugin_module
from tetrarch.plugins import PLUGIN_API_VERSION, Allocator, BackendKind, PluginSource, Registry, Status, Transport
from tetrarch_plugin_template._allocator import SandboxAllocator
from tetrarch_plugin_template._transport import ThreadedTransport

# tomllib is in the standard library from Python 3.11; the template supports 3.10.
tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11 (tomllib)")

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


@pytest.fixture
def registry() -> Iterator[Registry]:
    """Core's builtins and the template, registered as its entry point would register it."""
    meta = tomllib.loads(PYPROJECT.read_text())["project"]
    (name, target), = meta["entry-points"]["tetrarch"].items()
    assert target == plugin_module.__name__
    source = PluginSource(sys.modules[target], name, meta["name"], meta["version"])
    reg = Registry(plugins=[source], entry_points=False)
    yield reg
    reg.close()


def test_rows_are_available(registry: Registry) -> None:
    for kind, name in [(BackendKind.TRANSPORT, "threaded"), (BackendKind.ALLOCATOR, "sandbox")]:
        row = registry.status(kind, name)
        assert (row.status, row.distribution, row.version) == (Status.AVAILABLE, "tetrarch-plugin-template", "0.1.0")


def test_chosen_by_name_the_factories_build_the_backends(registry: Registry) -> None:
    assert isinstance(registry.get_transport("threaded"), ThreadedTransport)
    assert isinstance(registry.get_transport("threaded"), Transport)
    assert isinstance(registry.get_allocator("sandbox"), SandboxAllocator)
    assert isinstance(registry.get_allocator("sandbox"), Allocator)


def test_never_chosen_over_core_unless_asked(registry: Registry) -> None:
    assert registry.select(BackendKind.TRANSPORT, address="tcp://127.0.0.1:0").name == "tcp"


def test_written_for_the_plugin_api_of_this_tetrarch(registry: Registry) -> None:
    """The template declares the plugin API version it was written for, and this tetrarch loads it.

    A copy keeps its ``tetrarch_plugin_api`` until it uses a name of a newer plugin API:
    the MAJOR must match tetrarch's, the MINOR be no newer.
    """
    major, minor = (int(n) for n in plugin_module.tetrarch_plugin_api.split("."))
    core_major, core_minor = (int(n) for n in PLUGIN_API_VERSION.split("."))
    assert major == core_major and minor <= core_minor
    (record,) = [p for p in registry.plugins() if p.distribution == "tetrarch-plugin-template"]
    assert (record.state.value, record.api) == ("loaded", plugin_module.tetrarch_plugin_api)
