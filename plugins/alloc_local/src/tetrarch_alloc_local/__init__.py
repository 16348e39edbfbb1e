"""tetrarch allocator whose "hosts" are host agent processes on this machine (backend ``local``).

Usually reached through the registry (``TETRARCH_ALLOCATOR=local`` or by priority);
the classes load lazily so the entry point stays featherweight.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["LocalAllocation", "LocalAllocator"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import _local

        return getattr(_local, name)
    raise AttributeError(f"module 'tetrarch_alloc_local' has no attribute {name!r}")


if TYPE_CHECKING:  # pragma: no cover
    from ._local import LocalAllocation, LocalAllocator
