"""Actors of tests/kernel/test_zygote.py: what a proc knows of how it was started."""

from __future__ import annotations

import gc
import os
import random
import sys
import threading
from typing import Any

import psutil

from tetrarch import Actor, endpoint


class Probe(Actor):
    """Reports its process's lineage, environment and imports."""

    @endpoint
    def facts(self, modules: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
        me = psutil.Process()
        np = sys.modules.get("numpy")
        return {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "rank": os.environ.get("RANK"),
            "secret_vars": sorted(k for k in os.environ if k.startswith("TETRARCH_SECRET")),
            "argv0": sys.argv[0],
            "cmdline": " ".join(me.cmdline()),
            "threads": threading.active_count(),
            "imported_in": {m: getattr(sys.modules.get(m), "IMPORTED_IN", None) for m in modules},
            "random": random.random(),
            "np_random": float(np.random.random()) if np is not None else None,
            "pgid": os.getpgid(0),
            "stdin": os.path.realpath("/proc/self/fd/0"),
            "frozen": gc.get_freeze_count(),
        }

    @endpoint
    def inherited(self, modules: list[str]) -> dict[str, bool]:
        """Per module: imported before this proc's fork, in its zygote (its namespace is among the objects the
        zygote froze out of the collector's reach, which ``gc.get_objects()`` does not list)."""
        tracked = {id(o) for o in gc.get_objects()}
        return {m: m in sys.modules and id(vars(sys.modules[m])) not in tracked for m in modules}

