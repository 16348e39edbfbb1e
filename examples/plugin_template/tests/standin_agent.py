"""A stand-in host agent (standard library only) for the allocator's tests.

Reads the allocation's secret once from the file named by ``TETRARCH_SECRET_FILE`` and
deletes it, as core's host agent does; says ``<index>:<secret>:<working directory>``
through the FIFO named by its ``TETRARCH_HOST_INDEX`` in ``FIFO_DIR``; then waits for a
signal.
"""

from __future__ import annotations

import os
import signal


def main() -> None:
    index = os.environ["TETRARCH_HOST_INDEX"]
    path = os.environ.pop("TETRARCH_SECRET_FILE")
    with open(path) as f:
        secret = f.read().strip()
    os.unlink(path)
    with open(os.path.join(os.environ["FIFO_DIR"], index), "w") as fifo:
        fifo.write(f"{index}:{secret}:{os.getcwd()}")
    signal.pause()


if __name__ == "__main__":
    main()
