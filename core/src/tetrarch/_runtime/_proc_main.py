"""Entry point of a proc: run a proc runtime until stopped or orphaned."""

from __future__ import annotations

import os
import socket
import sys
import threading

from . import _serial, _wire
from ._owner import start_heartbeat
from ._proc import PeerUnreachable
from ._root import ENV_SECRET, ENV_TRANSPORT, Root, adopt_client_sys_path, install_root

__all__ = ["main"]


def main() -> int:
    secret = bytes.fromhex(os.environ.pop(ENV_SECRET))  # not visible to user code and its children
    owner = os.environ["TETRARCH_OWNER_ADDR"]
    ident = os.environ["TETRARCH_PROC_ID"]
    adopt_client_sys_path()
    done = threading.Event()
    orphaned = []
    root = Root("proc", secret, os.environ.get(ENV_TRANSPORT) or None, name=ident, on_proc_exit=done.set)
    install_root(root)

    def lost(addr: str, _err: object) -> None:
        if addr == owner:
            orphaned.append(addr)
            done.set()

    root.runtime.on_peer_lost(lost)

    def orphan(reason: str) -> None:
        print(f"tetrarch proc {ident}: exiting: {reason}", file=sys.stderr)
        orphaned.append(reason)
        done.set()

    ready = (ident, root.runtime.address, os.getpid(), socket.gethostname())
    try:
        root.runtime.send(owner, [_wire.header(_wire.SYS, "owner", "ready", None, None), *_serial.dumps(ready)])
    except PeerUnreachable as exc:
        print(f"tetrarch proc {ident}: cannot reach its owner at {owner}: {exc}", file=sys.stderr)
        return 2
    start_heartbeat(root.runtime, owner, orphan)
    done.wait()
    root.close()
    if orphaned:
        os._exit(0)  # owner gone: do not wait on actors that may be blocked
    return 0


if __name__ == "__main__":
    sys.exit(main())
