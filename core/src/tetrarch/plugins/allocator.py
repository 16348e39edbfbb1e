"""Everything an allocator plugin's implementation needs: the interfaces, process launching, the agent.

Import it from the modules that implement the allocator (the factory's module), never
from the featherweight entry point module, which imports only :mod:`tetrarch.plugins`.

The interfaces (contracts in their docstrings; docs/plugins.md §5): :class:`Allocator`
(implement ``_allocate``; the public ``allocate`` validates first), :class:`Allocation`,
:class:`AllocRequest`, :class:`AgentCommand` (the host agent's command, environment
and secret), :class:`AllocatorError` (also ``tetrarch.AllocatorError``).

**Starting processes**: :func:`spawn_watched` starts one process the way every tetrarch
launcher does (its own process group, a parent-death signal, stderr forwarded and its
tail kept, the secret through a pipe) and returns a :class:`WatchedProcess`; its end is
an :class:`ExitInfo`. :func:`process_gone` says whether a process ended.

**The host agent**: core's agent is the module :data:`HOST_AGENT_MODULE`
(``python -m`` it); the variables the kernel sets for it are :data:`ENV_CLIENT_ADDR`
(the client to connect back to), :data:`ENV_HOST_INDEX` (its index, set by
``AgentCommand.env_for``) and :data:`ENV_SECRET_FILE` (the secret's file, set by
``env_for(index, secret_file=...)``), each a :class:`LaunchVar` whose ``name`` is the
variable. :func:`source_ip_toward` gives the local address that routes to a host (for
``Allocator.client_host``).

**A complete small allocator**: :class:`LocalAllocator` (the ``local`` backend: host agents
as processes of this machine) and its :class:`LocalAllocation`. They live in the plugin
distribution ``tetrarch-alloc-local`` (a dependency of ``tetrarch``; module
``tetrarch_alloc_local``), written against this module alone, and are re-exported here on
first use; where that distribution is missing, importing them raises :class:`ImportError`
naming ``pip install tetrarch-alloc-local``.

Job classes a plugin may subclass (``SlurmJob``) come from :mod:`tetrarch.job`
(``AllocatorJob``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._config_launch import ENV_CLIENT_ADDR, ENV_HOST_INDEX, ENV_SECRET_FILE, LaunchVar
from .._runtime.plumbing._alloc import (
    HOST_AGENT_MODULE,
    AgentCommand,
    Allocation,
    Allocator,
    AllocatorError,
    AllocRequest,
)
from .._runtime.plumbing._proc_state import process_gone
from .._runtime.plumbing._spawn import ExitInfo, WatchedProcess, spawn_watched
from .._transport._route import source_ip_toward

__all__ = [
    "ENV_CLIENT_ADDR",
    "ENV_HOST_INDEX",
    "ENV_SECRET_FILE",
    "HOST_AGENT_MODULE",
    "AgentCommand",
    "AllocRequest",
    "Allocation",
    "Allocator",
    "AllocatorError",
    "ExitInfo",
    "LaunchVar",
    "LocalAllocation",
    "LocalAllocator",
    "WatchedProcess",
    "process_gone",
    "source_ip_toward",
    "spawn_watched",
]

#: Names re-exported from the ``tetrarch-alloc-local`` plugin, imported on first use.
_FROM_LOCAL_PLUGIN = ("LocalAllocation", "LocalAllocator")
_LOCAL_PLUGIN = "tetrarch_alloc_local"

if TYPE_CHECKING:  # pragma: no cover
    from tetrarch_alloc_local import LocalAllocation, LocalAllocator


def __getattr__(name: str) -> Any:
    """``LocalAllocator`` and ``LocalAllocation`` from the ``tetrarch-alloc-local`` plugin (PEP 562).

    Raises:
        ImportError: that distribution is not installed (the message names ``pip install tetrarch-alloc-local``).
        AttributeError: no such name.
    """
    if name not in _FROM_LOCAL_PLUGIN:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(_LOCAL_PLUGIN)
    except ModuleNotFoundError as exc:
        if exc.name != _LOCAL_PLUGIN:
            raise
        raise ImportError(f"{__name__}.{name} comes with the local allocator's distribution, tetrarch-alloc-local "
                          f"(a dependency of tetrarch), which is not installed: pip install tetrarch-alloc-local",
                          name=__name__) from exc
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
