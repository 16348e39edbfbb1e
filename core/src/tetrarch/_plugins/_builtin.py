"""Core's own backends (ipc/tcp transports, tcp/shm RDMA) and default selection policy.

Registered directly by the registry (not through an entry point), under the
distribution ``tetrarch``. Two plugin objects, so a test registry can keep the policy
while leaving the builtin backends out. Core has no allocator of its own: ``local``
comes with ``tetrarch-alloc-local`` (a dependency of ``tetrarch``), through its entry point.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from ._helpers import module_present
from ._hookspecs import hookimpl
from ._request import SelectionRequest
from ._specs import BackendKind, BackendSpec, Capability, ProbeResult, RdmaBackendSpec, TransportSpec

__all__ = ["BuiltinBackends", "DefaultPolicy", "default_policy"]

_SAME, _MULTI = Capability.SAME_HOST, Capability.MULTI_HOST


def _module_of(factory: str) -> str:
    return factory.partition(":")[0]


def _written(factory: str) -> bool:
    """Whether the factory's module exists (core's RDMA backends are declared before they are written)."""
    return module_present(_module_of(factory))


_IPC = "tetrarch._transport._socket:IpcTransport"
_TCP = "tetrarch._transport._socket:TcpTransport"
_RDMA_TCP = "tetrarch._rdma._tcp:TcpRdmaBackend"
_RDMA_SHM = "tetrarch._rdma._shm:ShmRdmaBackend"


def _probe_ipc() -> ProbeResult:
    if not hasattr(socket, "AF_UNIX"):
        return ProbeResult.no("this platform has no AF_UNIX sockets", "use the 'tcp' transport")
    return ProbeResult.yes("unix domain sockets")


def _probe_tcp() -> ProbeResult:
    return ProbeResult.yes("TCP sockets")


def _probe_rdma_shm() -> ProbeResult:
    """Cross-memory attach works here (Yama and seccomp allow it); see ``tetrarch._runtime.plumbing._cma``."""
    from .._runtime.plumbing._cma import cma_probe

    ok, reason = cma_probe()
    if not ok:
        return ProbeResult.no(reason, "allow process_vm_readv (Yama ptrace_scope 0 or 1, a seccomp profile that "
                              "permits it), or use the 'tcp' RDMA backend")
    return ProbeResult.yes(reason)


class BuiltinBackends:
    """The transports and RDMA backends that ship inside core."""

    @hookimpl
    def tetrarch_transports(self) -> Sequence[TransportSpec]:
        return [
            TransportSpec(
                "ipc", _IPC, probe=_probe_ipc, priority=20, schemes=("ipc",),
                summary="unix domain sockets (same host)", capabilities=frozenset({_SAME}),
            ),
            TransportSpec(
                "tcp", _TCP, probe=_probe_tcp, priority=10, schemes=("tcp",),
                summary="TCP sockets", capabilities=frozenset({_SAME, _MULTI}),
            ),
        ]

    @hookimpl
    def tetrarch_rdma_backends(self) -> Sequence[RdmaBackendSpec]:
        return [
            RdmaBackendSpec(
                "tcp", _RDMA_TCP, implemented=_written(_RDMA_TCP), priority=0,
                summary="RDMA TCP fallback", capabilities=frozenset({_SAME, _MULTI}),
            ),
            RdmaBackendSpec(
                "shm", _RDMA_SHM, implemented=_written(_RDMA_SHM), probe=_probe_rdma_shm, priority=5,
                summary="same host: one copy by cross-memory attach (process_vm_readv/writev)",
                capabilities=frozenset({_SAME}),
            ),
        ]


def default_policy(candidates: Sequence[BackendSpec], request: SelectionRequest) -> BackendSpec | None:
    """Highest priority among the candidates that have every capability of ``request.require``;
    ties go to the alphabetically first name. None when none qualifies. Never raises."""
    fit = [c for c in candidates if request.require <= c.capabilities]
    if not fit:
        return None
    return min(fit, key=lambda c: (-c.priority, c.name))


class DefaultPolicy:
    """Core's selection policy; runs last so any plugin's policy goes first."""

    @hookimpl(trylast=True)
    def tetrarch_select_backend(
        self, kind: BackendKind, candidates: Sequence[BackendSpec], request: SelectionRequest
    ) -> BackendSpec | None:
        return default_policy(candidates, request)
