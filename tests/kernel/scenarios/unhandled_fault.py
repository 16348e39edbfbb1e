"""Scenario: an actor fails by broadcast while the main thread waits on a future that
never completes on its own; the fault must end the client anyway.

``python unhandled_fault.py HOOK WAIT_S``: ``HOOK`` is ``default`` (keep tetrarch's
fault hook) or ``raising`` (a hook that prints ``HOOK CALLED <n>`` and raises);
``WAIT_S`` is how long the main thread waits (seconds, not scaled here). Prints
``ATEXIT RAN`` from an atexit handler, ``FINALLY RAN`` when the wait is left, and
``MAIN ...`` only if the wait ended on its own. Run by ``test_fault_hook.py``.
"""

from __future__ import annotations

import atexit
import sys

import tetrarch
from supervision_actors import Fragile
from tetrarch import Channel, MeshFailure, this_host
from tetrarch.testing import scaled


def _install_raising_hook() -> None:
    calls: list[MeshFailure] = []

    def hook(failure: MeshFailure) -> None:
        calls.append(failure)
        print("HOOK CALLED", len(calls), flush=True)
        raise RuntimeError("hook raised on purpose")

    tetrarch.unhandled_fault_hook = hook


def main(hook: str, wait_s: float) -> None:
    if hook == "raising":
        _install_raising_hook()
    elif hook != "default":
        raise SystemExit(f"unknown hook {hook!r}: expected 'default' or 'raising'")
    atexit.register(lambda: print("ATEXIT RAN", flush=True))
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("doomed", Fragile)
    mesh.ok.call().get(timeout=scaled(10))
    mesh.slice(gpus=1).raise_exc.broadcast()
    _port, receiver = Channel.open()
    try:
        receiver.recv().get(timeout=wait_s)
        print("MAIN WOKE WITHOUT A MESSAGE")
    except TimeoutError:
        print("MAIN TIMED OUT")
    finally:
        print("FINALLY RAN", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
