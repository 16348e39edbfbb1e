"""What tests outside this distribution may use to learn what libfabric offers here (public).

:func:`discover` lists libfabric's providers in a child process and never raises; its
:class:`Providers` says which offer RMA (``rma``), which device memory (``hmem``), and why
none could be listed (``error``). tetrarch's CUDA tests use it to skip where the ``shm``
provider is missing.
"""

from __future__ import annotations

from ._discover import Providers, discover

__all__ = ["Providers", "discover"]
