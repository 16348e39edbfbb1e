"""A broken environment for chosen processes: put this folder on ``PYTHONPATH``.

Python imports ``sitecustomize`` at interpreter start, before anything else. A process
whose environment has the variable named by ``TETRARCH_TEST_BREAK_IF`` set, and not the
one named by ``TETRARCH_TEST_BREAK_UNLESS``, writes a message to stderr and exits with
code 7, as a process whose ML stack cannot be imported would. ``test_lifecycle.py``
uses it to make procs (``TETRARCH_PROC_ID``) or host agents fail to start.
"""

from __future__ import annotations

import os
import sys

EXIT_CODE = 7


def _break_this_process() -> bool:
    if_set = os.environ.get("TETRARCH_TEST_BREAK_IF")
    unless = os.environ.get("TETRARCH_TEST_BREAK_UNLESS")
    return bool(if_set and os.environ.get(if_set) and not (unless and os.environ.get(unless)))


if _break_this_process():
    sys.stderr.write("simulated broken environment: cannot import the ML stack\n")
    sys.stderr.flush()
    os._exit(EXIT_CODE)
