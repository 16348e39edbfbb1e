"""Typed accessors: ``get_transport`` and ``get_allocator``, on the registry and in ``tetrarch.plugins``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

import tetrarch.plugins
from tetrarch._config import configure
from tetrarch._plugins import Registry, get_registry, reset_registry
from tetrarch.plugins import Allocator, BackendKind, BackendNotFound, BackendUnavailable, Transport

pytestmark = pytest.mark.timeout(60)

T, A = BackendKind.TRANSPORT, BackendKind.ALLOCATOR


@pytest.fixture
def builtins_only() -> Iterator[Registry]:
    """Core's builtins, as if no plugin distribution were installed; its instances are closed afterwards."""
    registry = Registry(entry_points=False)
    yield registry
    registry.close()


def test_get_transport_returns_the_registry_instance(builtins_only: Registry) -> None:
    tcp = builtins_only.get_transport("tcp")
    assert isinstance(tcp, Transport) and type(tcp).__name__ == "TcpTransport"
    assert tcp is builtins_only.create(T, "tcp") is builtins_only.get_transport("tcp")


def test_get_transport_without_a_name_selects(builtins_only: Registry) -> None:
    assert type(builtins_only.get_transport()).__name__ == "IpcTransport"  # priority 20 beats tcp's 10
    configure(transport="tcp")
    assert type(builtins_only.get_transport()).__name__ == "TcpTransport"


def test_unknown_names_list_the_choices_and_the_install_hint(builtins_only: Registry) -> None:
    with pytest.raises(BackendNotFound, match=r"no transport backend named 'pigeon'.*ipc \(available; ipc://\)"):
        builtins_only.get_transport("pigeon")
    with pytest.raises(BackendNotFound, match=r"'zmq' comes with tetrarch-transport-zmq: pip install .tetrarch\[zmq\]"):
        builtins_only.get_transport("zmq")
    with pytest.raises(BackendNotFound, match=r"'slurm' comes with tetrarch-alloc-slurm: pip install .tetrarch\[slu"):
        builtins_only.get_allocator("slurm")
    # core alone has no allocator: `local` comes with tetrarch-alloc-local, which tetrarch depends on
    with pytest.raises(BackendUnavailable, match=r"no allocator backend is .*pip install tetrarch-alloc-local"):
        builtins_only.get_allocator()


def test_get_allocator_returns_an_allocator() -> None:
    registry = Registry()
    try:
        local = registry.get_allocator("local")
        assert isinstance(local, Allocator) and type(local).__name__ == "LocalAllocator"
        configure(allocator="local")
        assert registry.get_allocator() is local
    finally:
        registry.close()


def test_a_factory_building_the_wrong_type_is_a_type_error(fakes, make_registry) -> None:
    registry = make_registry(fakes.source("d", fakes.spec(T, "odd"), fakes.spec(A, "odd")))
    with pytest.raises(TypeError, match=r"transport backend 'odd' built a types.SimpleNamespace, which is no "
                                        "tetrarch.plugins.Transport"):
        registry.get_transport()
    with pytest.raises(TypeError, match=r"allocator backend 'odd' built .*no tetrarch.plugins.Allocator"):
        registry.get_allocator("odd")


def test_module_functions_use_the_process_registry() -> None:
    try:
        assert tetrarch.plugins.get_transport("tcp") is get_registry().create(T, "tcp")
        assert tetrarch.plugins.get_allocator("local") is get_registry().create(A, "local")
    finally:
        reset_registry(close=True)
    assert {"get_transport", "get_allocator"} <= set(tetrarch.plugins.__all__)


def test_importing_the_plugin_layer_leaves_the_runtime_unloaded() -> None:
    code = (
        "import sys, tetrarch.plugins, tetrarch._plugins, tetrarch._cli\n"
        "loaded = [m for m in sys.modules if m.startswith(('tetrarch._runtime', 'tetrarch._transport'))]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
