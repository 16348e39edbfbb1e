"""The kernel's layer map (``tetrarch._runtime.LAYERS``) holds for every import.

Every ``import`` counts: at module level, under ``TYPE_CHECKING`` and inside functions.
A module may import from its own layer or below, never from above, and no import
cycle may exist (not even within a layer).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tetrarch
from tetrarch._runtime import EXACT, LAYERS

# Import rules: no transport (run once, not per transport).
pytestmark = pytest.mark.transport_independent

PACKAGE = Path(tetrarch.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer_of(module: str) -> int | None:
    """The index in ``LAYERS`` of the layer ``module`` belongs to: its longest matching member's."""
    best: tuple[int, int] | None = None  # (length of the member, layer index)
    for index, (_layer, members) in enumerate(LAYERS):
        for member in members:
            matches = module == member or (member not in EXACT and module.startswith(member + "."))
            if matches and (best is None or len(member) > best[0]):
                best = (len(member), index)
    return best[1] if best is not None else None


def imports_of(source: str, module: str, modules: set[str], is_package: bool = False) -> set[str]:
    """The modules of ``modules`` that ``source`` (the text of ``module``) imports, anywhere in it."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from . import _wire` imports the submodule, not the package
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return found & modules


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``"a (layer) imports b (layer above)"`` for every import against the map."""
    bad = []
    for module, targets in sorted(graph.items()):
        mine = _layer_of(module)
        if mine is None:
            continue
        for target in sorted(targets):
            theirs = _layer_of(target)
            if theirs is not None and theirs > mine:
                bad.append(f"{module} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]})")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles of ``graph`` (each as the modules along it)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def _package_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    graph = {}
    for name, path in files.items():
        graph[name] = imports_of(path.read_text(), name, modules, path.name == "__init__.py") - {name}
    return graph


def test_every_kernel_module_has_a_layer() -> None:
    graph = _package_graph()
    homeless = sorted(m for m in graph if _layer_of(m) is None and not m.startswith("tetrarch.testing"))
    assert not homeless, f"add these modules to tetrarch._runtime.LAYERS (and its docstring map): {homeless}"


def test_no_module_imports_from_a_layer_above_it() -> None:
    bad = upward_imports(_package_graph())
    assert not bad, "imports against the layer map in tetrarch/_runtime/__init__.py:\n" + "\n".join(bad)


def test_the_kernel_has_no_import_cycle() -> None:
    found = [c for c in cycles(_package_graph()) if all(_layer_of(m) is not None for m in c)]
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


@pytest.mark.parametrize("snippet", [
    "from ..meshes._proc_mesh import ProcMesh\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..meshes._mesh import ActorMesh\n",
    "def f():\n    from ..process._root import get_root\n    return get_root()\n",
    "import tetrarch._runtime.meshes._channel\n",
    "from ..actors import _runner\n",
    "import tetrarch\n",
    "from tetrarch.job import LocalJob\n",
])
def test_the_check_catches_an_upward_import_wherever_it_hides(snippet: str) -> None:
    """An upward import added to a services module is reported, also when hidden."""
    graph = _package_graph()
    module = "tetrarch._runtime.services._port"
    graph[module] = graph[module] | imports_of(snippet, module, set(graph))
    bad = upward_imports(graph)
    assert any(line.startswith(f"{module} (services) imports") for line in bad), bad


def test_the_check_catches_a_cycle_within_a_layer() -> None:
    graph = _package_graph()
    wire, outcome = "tetrarch._runtime.values._wire", "tetrarch._runtime.values._outcome"
    graph[wire] = graph[wire] | {outcome}
    assert any(wire in c for c in cycles(graph))


@pytest.mark.parametrize(("module", "snippet", "layer"), [
    ("tetrarch.plugins", "from .._runtime.meshes._proc_mesh import ProcMesh\n", "plugin API"),
    ("tetrarch.rdma", "from tetrarch.plugins import Registry\n", "rdma"),
    ("tetrarch.job", "from tetrarch._spmd._job import serve\n", "meshes"),
    ("tetrarch.config", "from tetrarch._runtime.values._shape import Shape\n", "foundation"),
])
def test_public_entry_modules_keep_their_place(module: str, snippet: str, layer: str) -> None:
    """The public entry modules sit in the map too: one importing from above its layer is reported."""
    graph = _package_graph()
    graph[module] = graph[module] | imports_of(snippet, module, set(graph), is_package=True)
    bad = upward_imports(graph)
    assert any(line.startswith(f"{module} ({layer}) imports") for line in bad), bad


def test_every_layer_below_the_api_is_one_package_or_module_group() -> None:
    """The kernel's own layers are packages of ``tetrarch._runtime``: the folders read like the map."""
    router = PACKAGE / "_runtime"
    folders = sorted(p.name for p in router.iterdir() if (p / "__init__.py").is_file())
    kernel_layers = [name for name, members in LAYERS if any(m.startswith("tetrarch._runtime.") for m in members)]
    assert folders == sorted(kernel_layers)
    assert not [p.name for p in router.glob("_*.py") if p.name != "__init__.py"], "a kernel module outside its layer"
