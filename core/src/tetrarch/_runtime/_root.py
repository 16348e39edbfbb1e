"""The process-wide runtime: the client's (created lazily) or a proc's / host agent's.

Every process that takes part in a mesh has exactly one :class:`Root`: its proc
runtime, the allocation secret, and the ``owner`` service that tracks the host
agents and procs this process started (spawning is allowed from actors too).
"""

from __future__ import annotations

import atexit
import os
import secrets
import sys
import threading
from collections.abc import Callable
from typing import Any

from .._plugins import get_registry
from .._plugins._specs import BackendKind
from ._owner import Owner
from ._proc import ProcRuntime
from ._port import link_service
from ._procagent import ProcAgent
from ._supervision import Supervisor, install_exit_path

__all__ = ["ENV_SECRET", "Root", "child_env", "get_root", "install_root", "root_if_any"]

ENV_SECRET = "TETRARCH_SECRET"
ENV_TRANSPORT = "TETRARCH_TRANSPORT"

_root: Root | None = None
_lock = threading.Lock()


class Root:
    """This process's runtime and bookkeeping."""

    def __init__(self, role: str, secret: bytes, transport_name: str | None, name: str,
                 on_proc_exit: Callable[[], None] | None = None) -> None:
        self.role = role
        self.secret = secret
        spec = get_registry().select(BackendKind.TRANSPORT, transport_name)
        self.transport_name = spec.name
        transport: Any = get_registry().create(BackendKind.TRANSPORT, spec.name)
        self.runtime = ProcRuntime(transport, secret, name=name)
        self.owner = Owner(self.runtime)
        self.runtime.add_service("owner", self.owner.service)
        self.supervisor = Supervisor(self.runtime, role)
        self.proc_agent = ProcAgent(self.runtime, on_exit=on_proc_exit)
        self.runtime.add_service("proc", self.proc_agent.service)
        self.runtime.add_service("port", link_service(self.runtime))
        self.this_host_mesh: Any = None  # HostMesh, set lazily by this_host()
        self.this_proc_mesh: Any = None
        self.host_agent_address = os.environ.get("TETRARCH_HOST_AGENT_ADDR") if role == "proc" else None
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.runtime.close()


def child_env(root: Root, extra: dict[str, str]) -> dict[str, str]:
    """Environment for a process this one starts: ours plus the allocation's secret."""
    env = dict(os.environ)
    env[ENV_SECRET] = root.secret.hex()
    env[ENV_TRANSPORT] = root.transport_name
    env.setdefault("TETRARCH_SYS_PATH", os.pathsep.join(p for p in sys.path if p))
    env.update(extra)
    return env


def adopt_client_sys_path() -> None:
    """Append the spawning client's ``sys.path`` entries we lack (same-host procs)."""
    for entry in os.environ.get("TETRARCH_SYS_PATH", "").split(os.pathsep):
        if entry and entry not in sys.path and os.path.isdir(entry):
            sys.path.append(entry)


def install_root(root: Root) -> None:
    """Make ``root`` this process's runtime (procs and host agents call this at start)."""
    global _root
    with _lock:
        _root = root


def root_if_any() -> Root | None:
    return _root


def get_root() -> Root:
    """This process's runtime, starting the client runtime on first use."""
    global _root
    root = _root
    if root is not None:
        return root
    with _lock:
        if _root is None:
            _root = Root("client", secrets.token_bytes(32), os.environ.get(ENV_TRANSPORT) or None, name="client")
            atexit.register(_shutdown_at_exit)
            install_exit_path()
        return _root


def _shutdown_at_exit() -> None:
    from ._procmesh import _shutdown_all

    if _root is not None:
        _root.supervisor.quiet = True  # stopping everything is not a failure
    _shutdown_all()
