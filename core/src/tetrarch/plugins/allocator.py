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

**A complete small allocator**: :class:`LocalAllocator` (core's ``local``: host agents as
processes of this machine) and its :class:`LocalAllocation`.

Job classes a plugin may subclass (``SlurmJob``) come from :mod:`tetrarch.job`
(``AllocatorJob``).
"""

from __future__ import annotations

from .._config_launch import ENV_CLIENT_ADDR, ENV_HOST_INDEX, ENV_SECRET_FILE, LaunchVar
from .._runtime._alloc import HOST_AGENT_MODULE, AgentCommand, Allocation, Allocator, AllocatorError, AllocRequest
from .._runtime._local_alloc import LocalAllocation, LocalAllocator
from .._runtime._procstate import process_gone
from .._runtime._spawn import ExitInfo, WatchedProcess, spawn_watched
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
