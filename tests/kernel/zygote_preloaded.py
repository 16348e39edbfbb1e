"""A module procs preload in tests/kernel/test_zygote.py: it remembers the process that imported it."""

import os

IMPORTED_IN = os.getpid()
