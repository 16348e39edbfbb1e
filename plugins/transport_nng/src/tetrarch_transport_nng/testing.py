"""What tests outside this distribution may use to speak nng's wire to this transport (public).

tetrarch's wire fuzzer (``tests/kernel/fuzz_wire.py``) opens connections to a listening proc
the way this transport's dialer does. Importing this module loads pynng.

* :data:`CHUNK`: the largest nng message the transport sends (a frame is cut into these);
* :data:`PAIR0_HEADER`: what nng sends first on a ``pair0`` connection (its SP header);
* :func:`hand_over`: give nng a connected stream descriptor for a pynng socket, as the
  dialer does (raises ``OSError`` where nng lacks ``socket://``).
"""

from __future__ import annotations

from ._conn import CHUNK, PAIR0_HEADER, hand_over

__all__ = ["CHUNK", "PAIR0_HEADER", "hand_over"]
