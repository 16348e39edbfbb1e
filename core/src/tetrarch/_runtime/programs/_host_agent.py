"""Host agent: one per host. Starts procs for their owners and reports how they end.

Started by an allocator plugin, which passes the allocation's secret outside the
environment (an inherited pipe or a 0600 file, see ``_secret``); it passes it to its
procs through a pipe. It connects back to the client, says ``ready``, then serves ``spawn_procs`` /
``kill_procs`` / ``shutdown``. It exits, killing its procs, when the client's
connection drops (the client died) or on ``shutdown``.

It watches the OS state of its procs (:class:`~._proc_state.StateMonitor`): a proc that stays
stopped past its ``TETRARCH_FROZEN_TIMEOUT`` is reported ``frozen`` to its owner, then
killed, so it cannot come back half-alive after its owner gave up on it.

It reads its procs' stdout and stderr and sends them, line by line, to their owners
(:class:`~._output.OutputForwarder`), unless ``TETRARCH_FORWARD_OUTPUT=0`` or
``ProcMesh.logging_option(stream_to_client=False)`` sends them to its own stdout and stderr.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from ..._config import (
    ENV_ALLOC_ID,
    ENV_CLIENT_ADDR,
    ENV_HOST_AGENT_ADDR,
    ENV_HOST_AGENT_PID,
    ENV_HOST_INDEX,
    ENV_OWNER_ADDR,
    ENV_PROC_COORDS,
    ENV_PROC_ID,
    ENV_PROC_MESH,
    ENV_RELAYED,
    FORK_PROCS,
    FORWARD_OUTPUT,
    FROZEN_TIMEOUT,
    HEARTBEAT_INTERVAL,
    PRELOAD,
    PROC_START_TIMEOUT,
    RELAY_MIN,
)
from ..._log import get_logger
from ..._plugins import BackendNotFound, BackendUnavailable
from ..plumbing._secret import take_secret
from ..plumbing._spawn import PROC_MAIN_MODULE, ExitInfo, WatchedProcess, die_with_launcher, spawn_watched
from ..process._root import Root, child_env, install_root, launched_root
from ..router._router import PeerUnreachable
from ..services._launch import StateMonitor, announce_ready, report_exit, report_frozen, start_heartbeat
from ..services._output import OutputForwarder, set_process_title
from ..services._relay import RelayService
from ..services._stack import StackService
from ..values import _serial, _wire
from ..values._cuda import remove_litter
from ._zygote import ForkRequest, Zygote, fork_zygote

__all__ = ["HostAgent", "main", "proc_visible_devices"]

_log = get_logger("host")


def proc_visible_devices(gpu: int, host_visible: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for proc ``gpu`` of a ``gpus`` dimension, given the host agent's own value.

    Unset on the host: GPU ``gpu`` (a proc past the host's GPU count sees none). Set: the
    ``gpu``-th device it lists, and none past its end; so ``CUDA_VISIBLE_DEVICES=`` (empty)
    in the client's environment hides every GPU from the procs, and ``2,3`` gives procs 0 and
    1 the physical GPUs 2 and 3 and never a GPU the user left out.
    """
    if host_visible is None:
        return str(gpu)
    listed = [d.strip() for d in host_visible.split(",") if d.strip()]
    return listed[gpu] if gpu < len(listed) else ""


class HostAgent:
    """The ``host`` service: starts procs for their owners, kills them, reports their ends."""

    def __init__(self, root: Root, client: str, zygote: Zygote | None = None) -> None:
        self.root = root
        self.client = client
        self.zygote = zygote  # forks procs (None, or gone: fresh interpreters)
        self.procs: dict[str, WatchedProcess] = {}
        self.owners: dict[str, str] = {}  # proc ident -> its owner's address
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.monitor = StateMonitor(self.frozen)
        self.output = OutputForwarder(root.router)
        self.relay = RelayService(root.router)  # mesh calls to several of our procs come as one message
        self.stacks = StackService(root.router, self.started)  # py-spy dumps of our procs (tetrarch stack)

    def service(self, hdr: _wire.SysHeader, payload: list, _conn: Any) -> None:
        """``host`` messages (I/O thread)."""
        if hdr.op == "spawn_procs":
            request: _wire.SpawnProcs = _serial.loads(payload)
            threading.Thread(target=self.spawn, args=(request,), name="tetrarch-spawn", daemon=True).start()
        elif hdr.op == "kill_procs":
            kill: _wire.KillProcs = _serial.loads(payload)
            with self.lock:
                targets = [self.procs[i] for i in kill.idents if i in self.procs]
            for p in targets:
                p.signal(kill.signal)
        elif hdr.op == "output_mode":
            mode: _wire.OutputMode = _serial.loads(payload)
            threading.Thread(target=self.set_output_mode, args=(mode, hdr), name="tetrarch-output-mode",
                             daemon=True).start()  # draining may wait for the forwarder: not on the I/O thread
        elif hdr.op == "shutdown":
            self.done.set()

    def set_output_mode(self, mode: _wire.OutputMode, hdr: _wire.SysHeader) -> None:
        """Switch where the lines of ``mode.idents`` go, after those they wrote before the request went the old way."""
        with self.lock:
            procs = [self.procs[i] for i in mode.idents if i in self.procs]
        for proc in procs:
            proc.drain_output()
        self.output.set_forward(mode.idents, mode.forward)
        self.root.router.reply(hdr.reply_addr, hdr.reply_port, 0, _wire.OK, None)

    def spawn(self, request: _wire.SpawnProcs) -> None:
        """Start the procs of ``request``; each reports ready to ``request.owner``, and we report its exit.

        The zygote gets every fork request of ``request`` at once (:meth:`Zygote.spawn_many`);
        the procs it cannot fork start as fresh interpreters.
        """
        owner = request.owner
        host_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        plans: list[tuple[str, dict[str, str], list[str], Callable[[ExitInfo], None], bool]] = []
        for ident, extra, gpu, command in request.specs:
            env = child_env(self.root, extra)
            env.update({ENV_OWNER_ADDR.name: owner, ENV_PROC_ID.name: ident,
                        ENV_HOST_AGENT_ADDR.name: self.root.router.address, ENV_HOST_AGENT_PID.name: str(os.getpid())})
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = proc_visible_devices(gpu, host_visible)
            if 0 < RELAY_MIN.value_in(env) <= len(request.specs):  # its mesh calls will come through us
                env[ENV_RELAYED.name] = "1"
            else:
                env.pop(ENV_RELAYED.name, None)
            argv = [sys.executable, "-m", PROC_MAIN_MODULE]
            if command is not None:  # spawn_procs(bootstrap_command=...)
                argv = [command.program, *command.args]
                env.update(command.env)

            def on_exit(info: ExitInfo, ident: str = ident) -> None:
                self.output.finish(ident)  # every line it wrote reaches its owner before its exit report
                with self.lock:
                    self.procs.pop(ident, None)
                    self.owners.pop(ident, None)
                    self.monitor.remove(ident)
                remove_litter(info.pid)  # what CUDA IPC left in /dev/shm for it (values._cuda)
                report_exit(self.root.router, owner, ident, info.returncode, info.stderr_tail)

            self.output.add(ident, owner, env.get(ENV_PROC_MESH.name, ident), env.get(ENV_PROC_COORDS.name, ""),
                            FORWARD_OUTPUT.value_in(env))
            forkable = command is None and self.zygote is not None and FORK_PROCS.value_in(env)
            plans.append((ident, env, argv, on_exit, forkable))
        forked: dict[str, WatchedProcess] = {}
        if self.zygote is not None and any(plan[4] for plan in plans):
            batch = [plan for plan in plans if plan[4]]
            made = self.zygote.spawn_many(
                [ForkRequest(env, ended, partial(self.output.line, ident), PRELOAD.value_in(env),
                             PROC_START_TIMEOUT.value_in(env)) for ident, env, _argv, ended, _ in batch],
                secret=self.root.secret)
            forked = {plan[0]: proc for plan, proc in zip(batch, made, strict=True) if proc is not None}
        for ident, env, argv, ended, _ in plans:
            proc = forked.get(ident)
            if proc is None:
                try:
                    proc = spawn_watched(argv, env, ended, secret=self.root.secret,
                                         output=partial(self.output.line, ident))
                except OSError as exc:
                    self.output.finish(ident)
                    report_exit(self.root.router, owner, ident, 127, f"cannot start {argv[0]}: {exc}\n")
                    continue
            frozen_s, interval_s = FROZEN_TIMEOUT.value_in(env), HEARTBEAT_INTERVAL.value_in(env)
            with self.lock:
                if proc.exit_info is not None:  # it already ended: on_exit ran, nothing to watch
                    continue
                self.procs[ident] = proc
                self.owners[ident] = owner
                self.monitor.add(ident, proc.pid, frozen_s, interval_s)

    def started(self, pid: int) -> bool:
        """Whether ``pid`` is a live proc this agent started."""
        with self.lock:
            return any(p.pid == pid for p in self.procs.values())

    def frozen(self, ident: str, report: _wire.ProcFrozen) -> None:
        """The monitor saw the proc ``ident`` stopped past its frozen timeout: tell its owner, then kill it."""
        with self.lock:
            proc, owner = self.procs.get(ident), self.owners.get(ident)
        if proc is None or owner is None:
            return
        _log.warning("proc %s (pid %d) has been stopped (state %s) for %.1f s, past TETRARCH_FROZEN_TIMEOUT=%g s: "
                     "reporting it frozen to its owner and killing it", ident, proc.pid, report.state,
                     report.stopped_s, report.timeout_s)
        report_frozen(self.root.router, owner, report)  # before the kill: the owner's reason names the freeze
        proc.signal(signal.SIGKILL)

    def kill_all(self, grace: float) -> None:
        with self.lock:
            procs = list(self.procs.values())
        for p in procs:
            p.signal(signal.SIGTERM)
        for p in procs:
            if p.wait(grace) is None:
                p.signal(signal.SIGKILL)
        for p in procs:
            p.wait(grace)


def main() -> int:
    die_with_launcher()  # before anything: its launcher's end is ours
    secret = take_secret()  # from the inherited pipe or the 0600 file; never the environment; before plugins load
    # While this process runs one thread: it loads the plugin registry, then forks the zygote,
    # which holds only the secret its procs get too. In a forked proc it raises SystemExit.
    zygote = fork_zygote()
    client = os.environ[ENV_CLIENT_ADDR.name]
    alloc_id = os.environ[ENV_ALLOC_ID.name]
    index = int(os.environ.get(ENV_HOST_INDEX.name) or os.environ.get("SLURM_PROCID") or 0)
    set_process_title(f"tetrarch host-agent {index}")
    try:
        root = launched_root("host", secret, f"host{index}", client, f"host agent {index}")
    except (BackendNotFound, BackendUnavailable) as exc:
        print(f"tetrarch: {exc}", file=sys.stderr, flush=True)  # the client's ProcessStartError shows it
        return 2
    install_root(root)
    agent = HostAgent(root, client, zygote)
    root.router.add_service(_wire.SVC_HOST, agent.service)
    root.router.on_peer_lost(lambda addr, _err: agent.done.set() if addr == client else None)
    try:
        announce_ready(root.router, client, f"{alloc_id}/{index}")
    except PeerUnreachable as exc:
        _log.error("host agent %d cannot reach the client at %s: %s", index, client, exc)
        return 2

    def orphan(reason: str) -> None:
        _log.warning("host agent %d exiting: %s", index, reason)
        agent.done.set()

    heartbeat = start_heartbeat(root.router, client, orphan)
    agent.done.wait()
    heartbeat.set()  # a ping that fails from here on is our own closing, not a lost client
    agent.kill_all(grace=5.0)
    root.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
