"""The template's ``sandbox`` allocator passes tetrarch's allocator contract.

The kit gets hosts the way users do, by the allocator's name, so it needs the template's entry
point: install the template (``pip install -e .``). The repository runs these tests against an
installed copy (tests/plugins/test_plugin_third_party.py); from the source folder they skip.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tetrarch.testing.allocator import AllocatorConformance

if not importlib.metadata.entry_points(group="tetrarch", name="template"):
    pytest.skip("the allocator kit finds 'sandbox' through the template's entry point: pip install -e "
                "examples/plugin_template (tests/plugins/test_plugin_third_party.py runs this against an installed "
                "copy)", allow_module_level=True)


class TestSandboxAllocator(AllocatorConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def allocator(cls) -> str:
        return "sandbox"

    @pytest.mark.xfail(strict=True, reason="SandboxAllocator takes no options and ignores AllocRequest.options: "
                                           "refuse them (AllocatorError) to pass")
    def test_bad_options_are_refused_naming_the_fix(
            self, allocator: str, bad_options: Sequence[tuple[Mapping[str, object], str]],
            client_env: Mapping[str, str], client_dir: Path) -> None:
        super().test_bad_options_are_refused_naming_the_fix(allocator, bad_options, client_env, client_dir)
