"""tetrarch transport over pynng (backend ``nng``, addresses ``nng+tcp://``, ``nng+ipc://``).

Not implemented yet: ``tetrarch plugins`` reports it as ``not implemented`` and creating it
raises :class:`NotImplementedError`. Importing this package does not load pynng.
"""

from __future__ import annotations

__all__: list[str] = []
