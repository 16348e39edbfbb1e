"""The SPMD tests' folder on sys.path. ``procs`` (one 4-proc mesh per module, ``{"gpus": 4}``: torch imports
in ~1-2 s per proc) and the session-end shutdown are tests/conftest.py's."""

from __future__ import annotations

import os
import sys

# spmd_helpers.py (callables, a -m module) lives beside this file; procs import it too
# (tetrarch appends the client's sys.path to theirs).
sys.path.insert(0, os.path.dirname(__file__))
