"""tetrarch RDMA backend over EFA through libfabric (backend ``efa``).

Needs libfabric (``apt-get install libfabric1 libfabric-dev``), cffi and a C compiler: the
binding to libfabric is compiled on first use (see ``_build``). ``TETRARCH_EFA_PROVIDER``
selects the libfabric provider (default ``efa``; ``shm`` or ``tcp;ofi_rxm`` without EFA
hardware). See docs/rdma.md.
"""

from __future__ import annotations

__all__: list[str] = []
