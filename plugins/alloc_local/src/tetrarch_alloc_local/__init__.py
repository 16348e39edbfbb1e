"""Compatibility name for core's ``local`` allocator.

The ``local`` allocator (host agents as processes on this machine) is part of core
(``tetrarch``) since 0.1, so a plain ``pip install tetrarch`` runs ``this_host()``.
This distribution, ``tetrarch-alloc-local``, stays because documentation and users name
it: it only re-exports :class:`LocalAllocator` and :class:`LocalAllocation` from core
and registers no backend (a second ``local`` backend would be a conflict).
"""

from __future__ import annotations

from tetrarch.plugins.allocator import LocalAllocation, LocalAllocator

__all__ = ["LocalAllocation", "LocalAllocator"]
