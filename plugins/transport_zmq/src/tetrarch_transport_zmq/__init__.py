"""tetrarch transport over pyzmq (backend ``zmq``, addresses ``zmq+tcp://``, ``zmq+ipc://``).

Importing this package loads neither pyzmq nor the transport; the registry imports
:mod:`._zmq` only when the backend is used (``TETRARCH_TRANSPORT=zmq`` or a ``zmq+...``
address).
"""

from __future__ import annotations

__all__: list[str] = []
