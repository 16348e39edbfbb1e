"""tetrarch transport over pyzmq (backend ``zmq``, addresses ``zmq+tcp://``, ``zmq+ipc://``).

Not implemented yet: ``tetrarch plugins`` reports it as ``not implemented`` and creating it
raises :class:`NotImplementedError`. Importing this package loads neither pyzmq nor
the transport; the registry imports :mod:`._zmq` only when the backend is used.
"""

from __future__ import annotations

__all__: list[str] = []
