"""Scenario: failures a user reads (issue 10, "Failures you can read"), default fault hook.

``python readable_failures.py CASE``:

* ``init_uncaught``: an actor's ``__init__`` raises; the first call's ``get()`` raises,
  uncaught: the program ends with that one traceback (the remote ``__init__`` traceback
  included) and exit code 1, no fault-hook report.
* ``init_caught``: the same, caught; then ``initialized.get()`` raises too; prints
  ``CAUGHT <first line>`` and ``INITIALIZED <type>``, then ``AFTER`` and exits 0.
* ``crash_caught``: a proc dies (``os._exit``) while the main thread waits on a call to
  it; the ``SupervisionError`` is caught; prints ``CAUGHT``, ``AFTER <answer of rank 0>``
  and exits 0: a failure the user received is handled.
* ``crash_unwaited``: a proc dies while nothing waits on it (the main thread waits on a
  channel): the default hook ends the program with exit code 1 and its one-line reason.

Prints ``READY`` before the failure and ``ATEXIT`` from an atexit handler. Run by
``test_readable_failures.py``.
"""

from __future__ import annotations

import atexit
import sys

from supervision_actors import Fragile
from tetrarch import Actor, Channel, SupervisionError, endpoint, this_host
from tetrarch.testing import scaled


class BadConfig(Actor):
    def __init__(self) -> None:
        raise ValueError("bad config: lr must be positive")

    @endpoint
    def ping(self) -> int:
        return 1


def main(case: str) -> None:
    atexit.register(lambda: print("ATEXIT", flush=True))
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    print("READY", flush=True)
    if case.startswith("init_"):
        mesh = procs.spawn("bad", BadConfig)
        if case == "init_uncaught":
            mesh.ping.call().get(timeout=scaled(10))
        try:
            mesh.ping.call().get(timeout=scaled(10))
        except SupervisionError as exc:
            print("CAUGHT", str(exc).splitlines()[0], flush=True)
        try:
            mesh.initialized.get(timeout=scaled(10))
        except Exception as exc:  # noqa: BLE001 - the scenario prints what it got
            print("INITIALIZED", type(exc).__name__, flush=True)
    elif case == "crash_caught":
        mesh = procs.spawn("doomed", Fragile)
        mesh.ok.call().get(timeout=scaled(10))
        try:
            mesh.slice(gpus=1).exit.call_one(3).get(timeout=scaled(10))
        except SupervisionError as exc:
            print("CAUGHT", str(exc).splitlines()[0], flush=True)
        print("AFTER", mesh.slice(gpus=0).ok.call_one().get(timeout=scaled(10)), flush=True)
    elif case == "crash_unwaited":
        mesh = procs.spawn("doomed", Fragile)
        mesh.ok.call().get(timeout=scaled(10))
        mesh.slice(gpus=1).exit.broadcast(3)
        _port, receiver = Channel.open()
        receiver.recv().get(timeout=scaled(30))
        print("MAIN WOKE", flush=True)
        return
    else:
        raise SystemExit(f"unknown case {case!r}")
    print("AFTER", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
