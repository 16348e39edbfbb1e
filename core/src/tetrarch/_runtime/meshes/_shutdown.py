"""Stopping everything a client started: at exit, on ``shutdown_context()``, and on a second Ctrl-C."""

from __future__ import annotations

import pickle
import signal
import threading
import time
import weakref
from typing import Any

from ..._config import STOP_TIMEOUT, TRACE_FILE
from ..._log import get_logger
from ..process._root import Root, get_root
from ..router._router import PeerUnreachable
from ..services._client_exit import sigint_seen
from ..services._launch import ProcRecord, stderr_note
from ..values import _serial, _wire
from ..values._future import Future

__all__ = ["kill_procs_at", "release_this_host", "shutdown_all", "shutdown_at_exit", "shutdown_context", "stop_procs"]

_log = get_logger("supervision")
#: How long stopping at exit may take before tetrarch says what it waits for (s): after a
#: Ctrl-C, and at a plain exit.
_QUIET_STOP_S = 1.0
_QUIET_EXIT_S = 5.0
#: The meshes this process started and has not stopped (``_proc_mesh`` adds and discards them).
#: Proc meshes are held until stopped, as their procs run until then (Monarch's rule: dropping
#: the reference does not end them): the client's exit then stops them cleanly (their atexit
#: handlers run) instead of leaving them to their host agent's kill.
# (Typed loosely: this module sits below _proc_mesh, which imports it.)
_live_proc_meshes: set[Any] = set()  # ProcMesh
_live_host_meshes: weakref.WeakSet[Any] = weakref.WeakSet()  # HostMesh


class _ThisProcess:
    """This process's ``this_host()`` and ``this_proc()`` meshes, made on first use."""

    host: Any = None  # HostMesh | None
    proc: Any = None  # ProcMesh | None


_this = _ThisProcess()


def _kill_records(root: Root, records: list[ProcRecord], requests: list) -> None:
    """Ask the host agents of ``requests`` to SIGKILL the procs of ``records``."""
    ids = [r.ident for r in records]
    for host, _specs in requests:
        try:
            root.router.send(host.address, [_wire.sys_header(_wire.SVC_HOST, "kill_procs"),
                                             *_serial.dumps(_wire.KillProcs(ids, 9))])
        except PeerUnreachable:
            pass


#: Seconds past ``TETRARCH_STOP_TIMEOUT`` a stop waits before it kills the procs that did not
#: exit: each had that long to end itself, saying why.
_KILL_GRACE_S = 1.0
#: Seconds a stop waits for the exit reports of procs it killed.
_LATE_REPORTS_S = 5.0


def kill_procs_at(root: Root, procs: list[ProcRecord], hosts: list[Any], addresses: set[str], why: str) -> None:
    """Have the host agents (``hosts``) SIGKILL those of ``procs`` at ``addresses`` that did not exit.

    ``why`` becomes part of their death reason.
    """
    doomed = [p for p in procs if p.address in addresses and p.returncode is None]
    for p in doomed:
        p.killed_because = why
    _kill_records(root, doomed, [(h, None) for h in hosts])


def stop_procs(root: Root, what: str, procs: list[ProcRecord], hosts: list[Any]) -> None:
    """Tell ``procs`` to stop and wait until they exited: ``TETRARCH_STOP_TIMEOUT`` and a grace.

    Each proc bounds its own stop by the timeout, saying why when it cuts it short; one
    still alive after the grace is killed through its host agent (``hosts``) and logged.
    """
    rt = root.router
    limit = STOP_TIMEOUT()
    deadline = time.monotonic() + limit + _KILL_GRACE_S
    # Procs already known dead (exit reported, or declared dead when their connection
    # dropped and no report could come, e.g. their host agent died) need no waiting.
    alive = [p for p in procs if not p.gone and p.address not in rt.dead_peers]

    def over(p: ProcRecord) -> bool:
        # Its exit was reported, or it was lost and no report can come (its host agent is dead).
        # Lost alone is not over: a proc closes its connections before its interpreter finalises.
        return p.returncode is not None or (p.lost and p.meta.get("agent") in rt.dead_peers)

    waiter = root.launches.expect_exits(alive, reports=True)
    for p in alive:
        try:  # numbered: after every call we sent it before, relayed ones included
            rt.send(p.address, [_wire.sys_header(_wire.SVC_PROC, "stop"), pickle.dumps(rt.stamp(p.address))])
        except PeerUnreachable:
            pass
    waiter.wait_until(over, deadline)
    late = [p for p in alive if not over(p)]
    if not late:
        return
    # Past the bound, and each had its chance to end itself saying why: kill them.
    kill_procs_at(root, late, hosts, {p.address for p in late},
                  f"it had not exited {limit + _KILL_GRACE_S:g} s after its stop")
    waiter.wait_until(over, time.monotonic() + _LATE_REPORTS_S)
    for p in late:
        if p.returncode is not None and p.returncode < 0:
            _log.warning("%s: %s (%s) had not exited %g s after its stop (TETRARCH_STOP_TIMEOUT=%g): it was "
                         "killed%s", what, p.what, p.where(), limit + _KILL_GRACE_S, limit,
                         stderr_note(p.stderr_tail))


def shutdown_all() -> None:
    """Stop every live proc mesh and host agent (atexit, and ``shutdown_context()``).

    When the procs take longer than a moment (a call still runs in them, e.g. after
    Ctrl-C), says what it waits for. A ``KeyboardInterrupt`` meanwhile (a second
    Ctrl-C) kills the procs at once instead.
    """
    meshes = [pm for pm in list(_live_proc_meshes) if pm._owned]
    futures = []
    for pm in meshes:
        try:
            futures.append(pm.stop())
        except Exception:  # noqa: BLE001
            pass
    try:
        _wait_for_stops(meshes, futures)
        _shutdown_hosts()
    except KeyboardInterrupt:
        _kill_now(meshes, futures)
        _shutdown_hosts()


def shutdown_at_exit() -> None:
    """The client's exit: :func:`shutdown_all`, then the trace file from every process's spans, if one is wanted."""
    shutdown_all()
    if TRACE_FILE():
        from ..._telemetry._perfetto import finish_trace_file

        finish_trace_file()


def _shutdown_hosts() -> None:
    for hm in list(_live_host_meshes):
        try:
            hm.shutdown()
        except Exception:  # noqa: BLE001
            pass


def _wait_for_stops(meshes: list[Any], futures: list[Future[None]]) -> None:
    limit = STOP_TIMEOUT()
    deadline = time.monotonic() + limit + 6
    # After Ctrl-C a call may still run in the procs: say soon what we wait for. A plain exit
    # waits quietly longer: clean interpreter shutdown (torch's, in 4 procs on 2 cores) takes seconds.
    quiet = _QUIET_STOP_S if sigint_seen() else _QUIET_EXIT_S
    if not all(_stopped_within(f, quiet) for f in futures):
        n = sum(1 for pm in meshes for p in pm._procs if p.returncode is None)
        _log.warning("stopping %d proc%s (waiting up to %g s for them to exit; Ctrl-C again to kill them now)", n,
                     "" if n == 1 else "s", limit)
    for f in futures:
        _stopped_within(f, max(deadline - time.monotonic(), 0.0))


def _stopped_within(fut: Future[None], timeout: float) -> bool:
    try:
        fut.get(timeout)
    except TimeoutError:
        return False
    except Exception:  # noqa: BLE001 - a failed stop is over too
        pass
    return True


def _kill_now(meshes: list[Any], futures: list[Future[None]]) -> None:
    """SIGKILL the procs of ``meshes`` and wait (briefly) until their stops are over."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a third Ctrl-C must not break the kill
    root = get_root()
    n = 0
    for pm in meshes:
        hosts = pm._host_mesh._hosts if pm._host_mesh is not None else []
        alive = [p for p in pm._procs if p.returncode is None]
        n += len(alive)
        _kill_records(root, alive, [(h, None) for h in hosts or []])
    _log.warning("killing %d proc%s now", n, "" if n == 1 else "s")
    for f in futures:
        _stopped_within(f, 5.0)


def shutdown_context() -> Future[None]:
    """Stop every proc mesh and host agent this process started (also runs at exit).

    Afterwards ``this_host()`` starts a fresh host agent on its next use.
    """
    shutdown_all()
    release_this_host()
    return Future._completed(None)


def release_this_host() -> None:
    """Shut down the client's ``this_host()`` agent (and its procs); the next use starts a fresh one.

    A proc's ``this_host()`` (its host agent, not owned here) is left alone.
    """
    mesh = _this.host
    if mesh is not None and mesh._owned:
        mesh.shutdown()
        _this.host = None

