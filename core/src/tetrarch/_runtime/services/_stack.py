"""A proc's stacks as py-spy sees them, taken by its host agent (the ``stack`` service).

py-spy reads another process's memory, so it sees a proc that cannot answer for itself: one
stopped in a C call that holds its GIL. The host agent runs no user code and always answers;
it dumps only the procs it started (a pid it did not start is refused), with py-spy from
``$PYSPY_BIN``, the ``PATH`` or the interpreter's own ``bin`` folder, within
:data:`DUMP_TIMEOUT_S`.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..router._router import Router
from ..values import _wire

__all__ = ["DUMP_TIMEOUT_S", "StackService", "pyspy_path"]

#: Seconds one ``py-spy dump`` may take.
DUMP_TIMEOUT_S = 15.0


def pyspy_path() -> str | None:
    """Where py-spy is on this host, or None."""
    import shutil  # here: a host agent imports this module at its start, and rarely dumps
    given = os.environ.get("PYSPY_BIN")
    if given:
        return given if os.access(given, os.X_OK) else None
    found = shutil.which("py-spy")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else None


def dump(pid: int) -> dict[str, Any]:
    """``{"tool", "text", "note"}``: py-spy's dump of ``pid`` (``tool`` None when py-spy is missing)."""
    import subprocess

    tool = pyspy_path()
    if tool is None:
        return {"tool": None, "text": "", "note": "py-spy is not installed on this proc's host (pip install py-spy): "
                                                  "a proc that holds its GIL cannot be seen without it"}
    try:
        done = subprocess.run([tool, "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=DUMP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"tool": "py-spy", "text": "", "note": f"py-spy did not finish within {DUMP_TIMEOUT_S:g} s"}
    except OSError as exc:
        return {"tool": "py-spy", "text": "", "note": f"py-spy could not run: {exc}"}
    note = "" if done.returncode == 0 else (done.stderr.strip() or f"py-spy exited with {done.returncode}")
    return {"tool": "py-spy", "text": done.stdout, "note": note}


class StackService:
    """A host agent's ``stack`` service: ``dump`` (a pickled pid) answered with :func:`dump`'s record."""

    def __init__(self, router: Router, started_here: Callable[[int], bool]) -> None:
        self.router = router
        self.started_here = started_here
        router.add_service(_wire.SVC_STACK, self.service)

    def service(self, hdr: _wire.SysHeader, payload: list, _conn: Any) -> None:
        """``stack`` messages (I/O thread); the dump runs on a thread of its own."""
        if hdr.op != "dump" or not payload:
            return
        pid = int(pickle.loads(payload[0]))
        if not self.started_here(pid):
            self.router.reply_later(hdr.reply_addr, hdr.reply_port, 0, _wire.OK,
                                    {"tool": None, "text": "", "note": f"pid {pid} is not a proc of this host agent"})
            return
        threading.Thread(target=self._answer, args=(pid, hdr.reply_addr, hdr.reply_port), daemon=True,
                         name="tetrarch-stack").start()

    def _answer(self, pid: int, raddr: str | None, rport: int | None) -> None:
        self.router.reply(raddr, rport, 0, _wire.OK, dump(pid))
