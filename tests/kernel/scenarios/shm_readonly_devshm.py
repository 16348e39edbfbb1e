"""Scenario: large arguments between processes of this host while /dev/shm is read-only.

Run by ``test_shm_payloads.py`` inside a private mount namespace where ``/dev/shm`` is
read-only: the shared-memory path uses anonymous ``memfd`` segments, so it still carries
the payload. Prints ``OK <origin>`` and exits 0.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from shm_actors import Keeper, describe
from tetrarch import shutdown_context, this_host

if __name__ == "__main__":
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        keeper = procs.spawn("readonly_devshm", Keeper)
        value = np.arange(1 << 20, dtype=np.float32)
        origin, _, _, crc, _ = keeper.describe.call_one(value).get(timeout=60)
        assert crc == describe(value)[3], "the payload arrived changed"
        print("OK", origin, flush=True)
    finally:
        procs.stop().get(timeout=60)
        shutdown_context().get(timeout=60)
