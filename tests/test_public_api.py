"""The public packages' ``__all__`` lists match what they lazily export, and every name resolves."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module", ["tetrarch", "tetrarch.plugins", "tetrarch.job", "tetrarch.job.spmd",
                                    "tetrarch.spmd"])
def test_all_lists_exactly_the_exported_names_and_each_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    lazy = set(getattr(mod, "_EXPORTS", {})) | set(getattr(mod, "_LAZY", {}))
    assert lazy <= set(mod.__all__), f"{module}: exported but missing from __all__: {sorted(lazy - set(mod.__all__))}"
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{module}.{name} does not resolve"
