"""Host agent: one per host. Starts procs for their owners and reports how they end.

Started by an allocator plugin with the allocation's secret in its environment. It
connects back to the client, says ``ready``, then serves ``spawn_procs`` /
``kill_procs`` / ``shutdown``. It exits, killing its procs, when the client's
connection drops (the client died) or on ``shutdown``.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from typing import Any

from .._errors import _describe_exit
from . import _serial, _wire
from ._owner import start_heartbeat
from ._proc import PeerUnreachable
from ._root import ENV_SECRET, ENV_TRANSPORT, Root, child_env, install_root
from ._spawn import ExitInfo, WatchedProcess, spawn_watched

__all__ = ["main"]


class HostAgent:
    def __init__(self, root: Root, client: str) -> None:
        self.root = root
        self.client = client
        self.procs: dict[str, WatchedProcess] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()

    def service(self, hdr: tuple, payload: list, _conn: Any) -> None:
        op = hdr[2]
        args = _serial.loads(payload) if payload else ()
        if op == "spawn_procs":
            threading.Thread(target=self.spawn, args=args, name="tetrarch-spawn", daemon=True).start()
        elif op == "kill_procs":
            ids, sig = args
            with self.lock:
                targets = [self.procs[i] for i in ids if i in self.procs]
            for p in targets:
                p.signal(sig)
        elif op == "shutdown":
            self.done.set()

    def spawn(self, owner: str, specs: list[tuple[str, dict[str, str], int | None]]) -> None:
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        for ident, extra, gpu in specs:
            env = child_env(self.root, extra)
            env.update({"TETRARCH_OWNER_ADDR": owner, "TETRARCH_PROC_ID": ident,
                        "TETRARCH_HOST_AGENT_ADDR": self.root.runtime.address})
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = visible[gpu] if gpu < len(visible) else str(gpu)

            def on_exit(info: ExitInfo, ident: str = ident) -> None:
                with self.lock:
                    self.procs.pop(ident, None)
                self.report(owner, ident, info.returncode, info.stderr_tail)

            try:
                proc = spawn_watched([sys.executable, "-m", "tetrarch._runtime._proc_main"], env, on_exit)
            except OSError as exc:
                self.report(owner, ident, 127, f"cannot start {sys.executable}: {exc}\n")
                continue
            with self.lock:
                self.procs[ident] = proc

    def report(self, owner: str, ident: str, returncode: int, tail: str) -> None:
        frames = [_wire.header(_wire.SYS, "owner", "exit", None, None), *_serial.dumps((ident, returncode, tail))]
        try:
            self.root.runtime.send(owner, frames)
        except PeerUnreachable:
            pass

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
    secret = bytes.fromhex(os.environ.pop(ENV_SECRET))
    client = os.environ["TETRARCH_CLIENT_ADDR"]
    alloc_id = os.environ["TETRARCH_ALLOC_ID"]
    index = int(os.environ.get("TETRARCH_HOST_INDEX") or os.environ.get("SLURM_PROCID") or 0)
    root = Root("host", secret, os.environ.get(ENV_TRANSPORT) or None, name=f"host{index}")
    install_root(root)
    agent = HostAgent(root, client)
    root.runtime.add_service("host", agent.service)
    root.runtime.on_peer_lost(lambda addr, _err: agent.done.set() if addr == client else None)
    ready = (f"{alloc_id}/{index}", root.runtime.address, os.getpid(), socket.gethostname())
    try:
        root.runtime.send(client, [_wire.header(_wire.SYS, "owner", "ready", None, None), *_serial.dumps(ready)])
    except PeerUnreachable as exc:
        print(f"tetrarch host agent: cannot reach the client at {client}: {exc}", file=sys.stderr)
        return 2

    def orphan(reason: str) -> None:
        print(f"tetrarch host agent {index}: exiting: {reason}", file=sys.stderr)
        agent.done.set()

    start_heartbeat(root.runtime, client, orphan)
    agent.done.wait()
    agent.kill_all(grace=5.0)
    root.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
