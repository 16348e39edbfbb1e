"""A template tetrarch plugin: the ``threaded`` transport and the ``sandbox`` allocator.

Importing this package imports neither backend: the registry imports
:mod:`._transport` or :mod:`._allocator` only when a user picks that backend.
"""

from __future__ import annotations

__all__: list[str] = []
