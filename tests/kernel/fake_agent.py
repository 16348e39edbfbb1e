"""A stand-in host agent for the LocalAllocator tests (standard library only).

Started with the allocator's environment as its whole environment: reads the secret
(hex) once from the inherited pipe named by ``TETRARCH_SECRET_FD`` and closes it, says
which host it is by writing ``<TETRARCH_HOST_INDEX>:<secret>`` to the FIFO named by its
index in ``FIFO_DIR``, then waits for a signal. With ``IGNORE_TERM`` set it ignores SIGTERM (only
SIGKILL ends it).
"""

from __future__ import annotations

import os
import signal


def main() -> None:
    if os.environ.get("IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    index = os.environ["TETRARCH_HOST_INDEX"]
    with os.fdopen(int(os.environ.pop("TETRARCH_SECRET_FD")), "rb") as pipe:
        secret = pipe.read().decode().strip()
    with open(os.path.join(os.environ["FIFO_DIR"], index), "w") as fifo:
        fifo.write(index + ":" + secret)
    signal.pause()


if __name__ == "__main__":
    main()
