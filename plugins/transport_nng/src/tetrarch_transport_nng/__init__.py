"""tetrarch transport over pynng (backend ``nng``, addresses ``nng+tcp://``, ``nng+ipc://``).

Importing this package does not load pynng; the transport is
``tetrarch_transport_nng._nng:NngTransport`` (see its module docstring for the design).
"""

from __future__ import annotations

__all__: list[str] = []
