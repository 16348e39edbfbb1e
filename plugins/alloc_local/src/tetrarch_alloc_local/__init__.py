"""tetrarch's ``local`` allocator: host agents as processes on this machine (backend ``local``).

Registered through this distribution's ``tetrarch`` entry point (``_plugin``), like every
other allocator; ``tetrarch`` depends on ``tetrarch-alloc-local``, so a plain
``pip install tetrarch`` runs ``this_host()``. :class:`LocalAllocator` and
:class:`LocalAllocation` are imported on first use (PEP 562), so that loading the entry
point module, which imports this package, stays featherweight.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["LocalAllocation", "LocalAllocator"]

if TYPE_CHECKING:  # pragma: no cover
    from ._local import LocalAllocation, LocalAllocator


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module(f"{__name__}._local"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
