"""Entry point of a proc: run a proc's router and services until stopped or orphaned.

A stopped proc ends as an interpreter does, minus the teardown of every module: its
non-daemon threads are joined, its atexit handlers run and its buffered output reaches
its owner; then it leaves with ``os._exit(0)``, as ``multiprocessing``'s workers do.
Tearing the modules down (and collecting everything they hold) cost each proc tens of
milliseconds of CPU for nothing anyone sees: 16 procs took 0.7 s to stop on 2 cores,
0.06-0.14 s without it. So a module-level object's ``__del__`` does not run at a proc's
exit; release what must be released in ``__cleanup__`` or an atexit handler. All of it is
bounded by what is left of the stop's ``TETRARCH_STOP_TIMEOUT``
(:func:`~._stop_guard.guard_exit`). An orphaned proc, or one told to exit at once, ends
with ``os._exit`` at once: its actors may be blocked.
"""

from __future__ import annotations

import atexit
import faulthandler
import io
import os
import sys
import threading
import time

from ..._config import ENV_OWNER_ADDR, ENV_PROC_COORDS, ENV_PROC_ID, ENV_PROC_MESH, ENV_RELAYED, STOP_TIMEOUT
from ..._log import get_logger
from ..._plugins import BackendNotFound, BackendUnavailable
from ..actors._proc_service import ACTORS_SHARE
from ..plumbing import _stdio
from ..plumbing._preload import preload
from ..plumbing._secret import take_secret
from ..plumbing._spawn import die_with_launcher
from ..plumbing._stop_guard import guard_exit
from ..process._root import adopt_client_sys_path, install_root, launched_root
from ..router._router import PeerUnreachable, Router
from ..services._launch import announce_ready, start_heartbeat
from ..services._output import set_process_title
from ..values._context import install_log_context

__all__ = ["main"]

_log = get_logger("proc")


def main() -> int:
    die_with_launcher()  # a fresh interpreter's launcher is its host agent (a forked proc's zygote did this)
    secret = take_secret()  # from the inherited pipe, closed before user code runs; never the environment
    owner = os.environ[ENV_OWNER_ADDR.name]
    ident = os.environ[ENV_PROC_ID.name]
    what = " ".join(filter(None, ("proc", os.environ.get(ENV_PROC_MESH.name, ident),
                                  os.environ.get(ENV_PROC_COORDS.name))))
    set_process_title(f"tetrarch {what}")
    # stdout and stderr are pipes to the host agent: Python's writes to them never block on an
    # agent that does not read (_stdio), and each line is written when printed, not when a
    # block fills (an actor's print shows at once, and none waits in a buffer a hard exit loses).
    _stdio.install()
    if isinstance(sys.stdout, io.TextIOWrapper) and not sys.stdout.line_buffering:
        sys.stdout.reconfigure(line_buffering=True)
    install_log_context()  # log records made inside an actor carry it (record.actor)
    faulthandler.enable()  # a crash (segfault, abort) writes the Python stacks to stderr, which is forwarded
    adopt_client_sys_path()
    preload()  # what a forked proc got from its zygote, a fresh interpreter imports now
    done = threading.Event()
    orphaned = []
    try:
        root = launched_root("proc", secret, ident, owner, f"proc {ident}", on_proc_exit=done.set)
    except (BackendNotFound, BackendUnavailable) as exc:
        print(f"tetrarch: {exc}", file=sys.stderr, flush=True)  # its owner's ProcessStartError shows it
        return 2
    install_root(root)

    def lost(addr: str, err: object) -> None:
        if addr == owner:
            _log.warning("proc %s exiting: the connection to its owner at %s closed%s", ident, owner,
                         f" ({err})" if err else "")
            orphaned.append(addr)
            done.set()

    root.router.on_peer_lost(lost)

    def orphan(reason: str) -> None:
        _log.warning("proc %s exiting: %s", ident, reason)
        orphaned.append(reason)
        done.set()

    try:
        announce_ready(root.router, owner, ident)
    except PeerUnreachable as exc:
        _log.error("proc %s cannot reach its owner at %s: %s", ident, owner, exc)
        return 2
    heartbeat = start_heartbeat(root.router, owner, orphan)
    if os.environ.get(ENV_RELAYED.name) == "1" and root.host_agent_address:
        _dial_ahead(root.router, root.host_agent_address)
    done.wait()
    heartbeat.set()  # a ping that fails from here on is our own closing, not a lost owner
    agent = root.proc_service
    if not (orphaned or agent.exit_reason):  # stopped: finalise normally, within what is left of the stop
        limit = STOP_TIMEOUT()
        left = agent.stop_deadline - time.monotonic() if agent.stop_deadline else limit * (1 - ACTORS_SHARE)
        guard_exit(what, max(left, 0.1), limit)
    root.close()
    if orphaned or agent.exit_reason:
        _stdio.flush_held()  # bounded: the agent may be the one that stopped reading
        os._exit(0 if orphaned else 1)  # owner or host agent gone: do not wait on actors that may be blocked
    _exit_without_teardown()
    return 0  # pragma: no cover - _exit_without_teardown does not return


def _dial_ahead(router: Router, agent: str) -> None:
    """Connect to our host agent now, on a thread of its own (a stop never waits for it): it relays our
    mesh's calls, and would otherwise dial each of its procs when the first call comes."""

    def dial() -> None:
        try:
            router.connect(agent)
        except PeerUnreachable as exc:  # refused too: the relay dials again, and reports what fails
            _log.debug("proc could not connect ahead to its host agent at %s: %s", agent, exc)

    threading.Thread(target=dial, name="tetrarch-dial-agent", daemon=True).start()


def _exit_without_teardown() -> None:
    """End as the interpreter would at ``sys.exit(0)``, minus tearing its modules down (see the module doc)."""
    # The interpreter's own first step (main thread): threading's exit callbacks (an executor's
    # workers are told to end), then every non-daemon thread joined. Joining the threads alone
    # would wait for good on an executor's idle workers.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()  # _stdio's hands on what it holds; logging flushes its handlers
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
