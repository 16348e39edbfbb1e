"""tetrarch: actors on meshes of processes, for PyTorch.

The public names follow Monarch's ``monarch.actor`` so programs port by changing
imports. Names load lazily: ``import tetrarch`` stays cheap (the CLI and plugin
listing never start the runtime).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._client_hooks import on_client_start as _on_client_start
from ._config_plugins import install_provider as _install_provider
from ._lazy import lazy_exports
from ._version import __version__


def _plugin_settings() -> dict:
    """The loaded plugins' settings, for the settings layer (which may not import the plugin layer)."""
    from ._plugins._settings import plugin_settings

    return plugin_settings()


_install_provider(_plugin_settings)


def _admin_autostart(_root: object) -> None:
    """Serve the admin API once the client's runtime starts, when the ``admin`` setting asks for it."""
    from ._config import ADMIN

    if ADMIN():
        from .admin import serve

        try:
            serve()
        except (ImportError, OSError, ValueError) as exc:
            raise RuntimeError(f"the admin server (TETRARCH_ADMIN) did not start: {exc}") from exc


_on_client_start(_admin_autostart)

_EXPORTS = {
    "Actor": "tetrarch._runtime.actors._actor",
    "endpoint": "tetrarch._runtime.actors._actor",
    "concurrent_endpoint": "tetrarch._runtime.actors._actor",
    "MeshFailure": "tetrarch._runtime.services._supervision",
    "unhandled_fault_hook": "tetrarch._runtime.services._supervision",
    "Endpoint": "tetrarch._runtime.services._endpoint",
    "Future": "tetrarch._runtime.values._future",
    "Channel": "tetrarch._runtime.meshes._channel",
    "Port": "tetrarch._runtime.services._port",
    "PortReceiver": "tetrarch._runtime.services._port",
    "Accumulator": "tetrarch._runtime.meshes._channel",
    "send": "tetrarch._runtime.meshes._channel",
    "ValueMesh": "tetrarch._runtime.values._value_mesh",
    "Extent": "tetrarch._runtime.values._shape",
    "Point": "tetrarch._runtime.values._shape",
    "Shape": "tetrarch._runtime.values._shape",
    "ActorMesh": "tetrarch._runtime.meshes._mesh",
    "ProcMesh": "tetrarch._runtime.meshes._proc_mesh",
    "HostMesh": "tetrarch._runtime.meshes._proc_mesh",
    "this_host": "tetrarch._runtime.meshes._proc_mesh",
    "this_proc": "tetrarch._runtime.meshes._proc_mesh",
    "BootstrapCommand": "tetrarch._runtime.plumbing._boot_cmd",
    "default_bootstrap_cmd": "tetrarch._runtime.plumbing._boot_cmd",
    "attach_to_workers": "tetrarch._runtime.meshes._attach",
    "proc_mesh": "tetrarch._runtime.meshes._compat",
    "run_worker_loop_forever": "tetrarch._runtime.programs._worker",
    "get_or_spawn_controller": "tetrarch._runtime.meshes._controller",
    "shutdown_context": "tetrarch._runtime.meshes._shutdown",
    "context": "tetrarch._runtime.values._context",
    "Context": "tetrarch._runtime.values._context",
    "current_rank": "tetrarch._runtime.values._context",
    "current_size": "tetrarch._runtime.values._context",
    "current_actor_name": "tetrarch._runtime.values._context",
    "ActorError": "tetrarch._errors",
    "AllocatorError": "tetrarch._errors",
    "ArgumentError": "tetrarch._errors",
    "ArgumentTypeError": "tetrarch._errors",
    "ConfigError": "tetrarch._errors",
    "EndpointNotFoundError": "tetrarch._errors",
    "FutureTimeoutError": "tetrarch._errors",
    "MeshIndexError": "tetrarch._errors",
    "MeshKeyError": "tetrarch._errors",
    "MeshNotFoundError": "tetrarch._errors",
    "MeshStoppedError": "tetrarch._errors",
    "NotOwnerError": "tetrarch._errors",
    "NotSupportedError": "tetrarch._errors",
    "ProcessStartError": "tetrarch._errors",
    "RemoteException": "tetrarch._errors",
    "SupervisionError": "tetrarch._errors",
    "TetrarchError": "tetrarch._errors",
    "UsageError": "tetrarch._errors",
    "configure": "tetrarch._config",
    "configured": "tetrarch._config",
}

__all__ = [
    "Accumulator",
    "Actor",
    "ActorError",
    "ActorMesh",
    "AllocatorError",
    "ArgumentError",
    "ArgumentTypeError",
    "BootstrapCommand",
    "Channel",
    "ConfigError",
    "Context",
    "Endpoint",
    "EndpointNotFoundError",
    "Extent",
    "Future",
    "FutureTimeoutError",
    "HostMesh",
    "MeshFailure",
    "MeshIndexError",
    "MeshKeyError",
    "MeshNotFoundError",
    "MeshStoppedError",
    "NotOwnerError",
    "NotSupportedError",
    "Point",
    "Port",
    "PortReceiver",
    "ProcMesh",
    "ProcessStartError",
    "RemoteException",
    "Shape",
    "SupervisionError",
    "TetrarchError",
    "UsageError",
    "ValueMesh",
    "__version__",
    "attach_to_workers",
    "concurrent_endpoint",
    "configure",
    "configured",
    "context",
    "current_actor_name",
    "current_rank",
    "current_size",
    "default_bootstrap_cmd",
    "endpoint",
    "get_or_spawn_controller",
    "proc_mesh",
    "run_worker_loop_forever",
    "send",
    "shutdown_context",
    "this_host",
    "this_proc",
    "unhandled_fault_hook",
]
# (kept literal so linters see the re-exports; tests/test_public_api.py checks it)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)


if TYPE_CHECKING:  # pragma: no cover
    from ._config import configure, configured
    from ._errors import (
        ActorError,
        AllocatorError,
        ArgumentError,
        ArgumentTypeError,
        ConfigError,
        EndpointNotFoundError,
        FutureTimeoutError,
        MeshIndexError,
        MeshKeyError,
        MeshNotFoundError,
        MeshStoppedError,
        NotOwnerError,
        NotSupportedError,
        ProcessStartError,
        RemoteException,
        SupervisionError,
        TetrarchError,
        UsageError,
    )
    from ._runtime.actors._actor import Actor, concurrent_endpoint, endpoint
    from ._runtime.meshes._attach import attach_to_workers
    from ._runtime.meshes._channel import Accumulator, Channel, send
    from ._runtime.meshes._compat import proc_mesh
    from ._runtime.meshes._controller import get_or_spawn_controller
    from ._runtime.meshes._mesh import ActorMesh
    from ._runtime.meshes._proc_mesh import HostMesh, ProcMesh, this_host, this_proc
    from ._runtime.meshes._shutdown import shutdown_context
    from ._runtime.plumbing._boot_cmd import BootstrapCommand, default_bootstrap_cmd
    from ._runtime.programs._worker import run_worker_loop_forever
    from ._runtime.services._endpoint import Endpoint
    from ._runtime.services._port import Port, PortReceiver
    from ._runtime.services._supervision import MeshFailure, unhandled_fault_hook
    from ._runtime.values._context import Context, context, current_actor_name, current_rank, current_size
    from ._runtime.values._future import Future
    from ._runtime.values._shape import Extent, Point, Shape
    from ._runtime.values._value_mesh import ValueMesh
