"""tetrarch RDMA backend over EFA through libfabric (backend ``efa``).

Needs the libfabric shared library (``apt-get install libfabric1 libfabric-dev``).
Not implemented yet: ``tetrarch plugins`` reports it as ``not implemented`` and creating it
raises :class:`NotImplementedError`.
"""

from __future__ import annotations

__all__: list[str] = []
