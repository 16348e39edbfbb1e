"""tetrarch RDMA backend over ibverbs (backend ``verbs``), through pyverbs.

pyverbs is not on PyPI as a wheel (``pyverbs==59.0`` is an sdist needing rdma-core 59
headers, libnl and ``cython<3.1``). Use Debian's ``python3-pyverbs`` (rdma-core): put a
folder that holds only its ``pyverbs`` package on ``PYTHONPATH``.

Not implemented yet: ``tetrarch plugins`` reports it as ``not implemented`` (and whether
pyverbs and an RDMA device are there) and creating it raises :class:`NotImplementedError`.
"""

from __future__ import annotations

__all__: list[str] = []
