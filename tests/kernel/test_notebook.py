"""tetrarch in a Jupyter notebook: a fresh ipykernel runs cells through nbclient.

An actor class defined in a cell, spawned on two procs; ``.get()`` and ``await`` in cells
(an asyncio loop runs in the kernel's thread: neither may warn); a failure caught with
try/except; a cell stuck in ``.get()`` on a long async endpoint, interrupted as the
notebook's interrupt button does (``interrupt_kernel``: SIGINT to the kernel's process
group), after which the next call is served at once; and ``procs.stop().get()``. No cell
may print a warning, and no process may outlive the kernel.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tetrarch.testing import scaled

nbformat = pytest.importorskip("nbformat", reason="the notebook test needs nbclient (pip install nbclient)")
nbclient = pytest.importorskip("nbclient", reason="the notebook test needs nbclient (pip install nbclient)")
pytest.importorskip("ipykernel", reason="the notebook test needs ipykernel (pip install ipykernel)")
psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.timeout(scaled(120))

WAIT_S = scaled(30.0)

DEFINE = '''
import asyncio, sys, threading, time
from pathlib import Path
from tetrarch import Actor, ActorError, Channel, endpoint, this_host

class Napper(Actor):
    @endpoint
    async def nap(self, started, seconds: float) -> str:
        started.send("napping")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled = getattr(self, "cancelled", 0) + 1
            raise
        return "woke"

    @endpoint
    async def add(self, a: int, b: int) -> int:
        return a + b

    @endpoint
    async def cancelled_naps(self) -> int:
        return getattr(self, "cancelled", 0)

    @endpoint
    async def boom(self) -> None:
        raise ValueError("boom from a notebook actor")
'''

SPAWN = '''
procs = this_host().spawn_procs(per_host={"procs": 2})
nappers = procs.spawn("nappers", Napper)
print("sum", nappers.add.call(1, 2).get().values())
'''

AWAIT = '''
print("awaited", await nappers.slice(procs=1).add.call_one(20, 3))
'''

CAUGHT = '''
try:
    nappers.slice(procs=0).boom.call_one().get()
except ActorError as exc:
    print("caught", "boom from a notebook actor" in str(exc))
'''

# The marker file says: the actor naps, and this cell's thread waits in Future.get (so the
# interrupt lands in the wait, not in the lines before it).
INTERRUPTED = '''
def _mark_when_waiting(started_rx, marker, main=threading.main_thread().ident):
    started_rx.recv().get()
    while True:
        frame = sys._current_frames().get(main)
        while frame is not None and frame.f_code.co_name != "_wait":
            frame = frame.f_back
        if frame is not None:
            Path(marker).write_text("waiting")
            return
        time.sleep(0.001)

started, started_rx = Channel.open()
threading.Thread(target=_mark_when_waiting, args=(started_rx, {marker!r}), daemon=True).start()
nap = nappers.slice(procs=1).nap.call_one(started, 600.0)
nap.get()
'''

AFTER = '''
t0 = time.monotonic()
print("after", nappers.slice(procs=1).add.call_one(4, 5).get(timeout={wait}))
print("prompt", time.monotonic() - t0 < {wait})
try:
    nap.get(timeout={wait})
except ActorError as exc:
    print("nap", "cancelled" in str(exc))
print("cancelled naps", nappers.slice(procs=1).cancelled_naps.call_one().get(timeout={wait}))
'''

STOP = '''
procs.stop().get()
print("stopped")
'''


def _text(cell: Any) -> str:
    return "".join(out.get("text", "") for out in cell.outputs if out.get("output_type") == "stream")


def _interrupt_when(marker: Path, client: Any, done: threading.Event) -> threading.Thread:
    """Interrupt the kernel (as the notebook's button does) once ``marker`` exists."""

    def go() -> None:
        deadline = time.monotonic() + WAIT_S
        while not marker.exists():  # a file another process writes: polled
            if done.wait(0.005) or time.monotonic() > deadline:
                return
        asyncio.run(client.km.interrupt_kernel())

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_notebook_calls_await_failure_interrupt_and_stop(tmp_path: Path) -> None:
    marker = tmp_path / "waiting"
    sources = [DEFINE, SPAWN, AWAIT, CAUGHT, INTERRUPTED.replace("{marker!r}", repr(str(marker))),
               AFTER.replace("{wait}", repr(WAIT_S)), STOP]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in sources])
    path = tmp_path / "tetrarch.ipynb"
    nbformat.write(nb, path)
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=WAIT_S, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(tmp_path)}})
    descendants: list[Any] = []
    with client.setup_kernel():
        kernel = psutil.Process(client.km.provisioner.process.pid)
        for index, cell in enumerate(nb.cells):
            done = threading.Event()
            waiter = _interrupt_when(marker, client, done) if "nap.get()" in cell.source else None
            try:
                client.execute_cell(cell, index)
            finally:
                done.set()
            if waiter is not None:
                waiter.join(WAIT_S)
            if index == 1:
                descendants = kernel.children(recursive=True)
    outputs = [_text(cell) for cell in nb.cells]
    errors = [[o for o in cell.outputs if o.get("output_type") == "error"] for cell in nb.cells]

    assert "sum [3, 3]" in outputs[1], outputs
    assert "awaited 23" in outputs[2], outputs
    assert "caught True" in outputs[3], outputs
    assert [e["ename"] for e in errors[4]] == ["KeyboardInterrupt"], errors[4]
    assert "after 9" in outputs[5] and "prompt True" in outputs[5], outputs
    assert "nap True" in outputs[5] and "cancelled naps 1" in outputs[5], outputs
    assert "stopped" in outputs[6], outputs
    assert [i for i, errs in enumerate(errors) if errs] == [4], errors
    for index, cell in enumerate(nb.cells):
        for out in cell.outputs:
            # (an error's traceback shows source lines around it: only its message counts)
            text = out.get("text", "") + out.get("evalue", "")
            assert "warn" not in text.lower(), (index, text)
            assert not (out.get("output_type") == "stream" and out.get("name") == "stderr"), (index, text)
    # The procs and the host agent were running, and none outlived the kernel.
    assert len(descendants) >= 3, descendants
    _gone, alive = psutil.wait_procs(descendants, timeout=WAIT_S)
    assert not alive, f"processes outlived the notebook's kernel: {alive}"
