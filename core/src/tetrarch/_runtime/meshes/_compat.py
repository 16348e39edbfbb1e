"""Monarch's older entry points, kept so its programs and examples port unchanged.

``proc_mesh(gpus=4, env={...})`` is how Monarch's examples up to 2025 made procs (its own
docs still show it, marked deprecated there); ``await proc_mesh(...)`` and
``await procs.spawn(...)`` are the older awaitable style, which :class:`ProcMesh` and
:class:`ActorMesh` accept (awaiting one waits for it to be ready and gives it back).
"""

from __future__ import annotations

import glob
import sys
import warnings
from collections.abc import Callable, Mapping

from ..._errors import ArgumentError, ArgumentTypeError, NotSupportedError
from ..plumbing._boot_cmd import default_bootstrap_cmd
from ._proc_mesh import ProcMesh, this_host

__all__ = ["proc_mesh"]


def _local_device_count() -> int:
    """GPUs this machine shows (torch's count when torch is already imported); at least 1."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return max(1, int(torch.cuda.device_count()))
        except Exception:  # noqa: BLE001 - a broken CUDA install still gets one proc
            return 1
    return max(1, len(glob.glob("/dev/nvidia[0-9]*")))


def proc_mesh(*, gpus: int | None = None, hosts: int = 1, env: Mapping[str, str] | None = None,
              setup: Callable[[], None] | None = None) -> ProcMesh:
    """Deprecated (as in Monarch): ``this_host().spawn_procs(per_host={"gpus": gpus})``.

    ``gpus`` defaults to this machine's GPU count (at least 1); ``hosts`` > 1 adds a
    ``hosts`` dimension in front (all on this machine, as Monarch's local version did);
    ``env`` is set in every proc. The result may be awaited (old style). Warns
    ``DeprecationWarning`` (shown once per calling line, Python's default).

    Raises:
        ArgumentTypeError: ``gpus``/``hosts`` are not positive integers, ``env`` not a mapping.
        ArgumentError: a size below 1.
        NotSupportedError: ``setup=`` (run the setup in an actor's ``__init__`` instead).
        ProcessStartError: a proc exited before it was ready.
    """
    warnings.warn("proc_mesh() is deprecated (as in Monarch): use this_host().spawn_procs(per_host={'gpus': n})",
                  DeprecationWarning, stacklevel=2)
    if setup is not None:
        raise NotSupportedError("proc_mesh(setup=...) is not supported: run the setup in the __init__ of an actor "
                                "spawned on the procs")
    if gpus is None:
        gpus = _local_device_count()
    for label, value in (("gpus", gpus), ("hosts", hosts)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentTypeError(f"proc_mesh({label}=...) takes a positive integer, got {value!r}")
        if value < 1:
            raise ArgumentError(f"proc_mesh({label}=...) must be at least 1, got {value}")
    if env is not None and not isinstance(env, Mapping):
        raise ArgumentTypeError(f"proc_mesh(env=...) takes a mapping of strings to strings, got {env!r}")
    per_host = {"hosts": hosts, "gpus": gpus} if hosts > 1 else {"gpus": gpus}
    command = default_bootstrap_cmd().with_env(dict(env)) if env else None
    return this_host().spawn_procs(per_host=per_host, bootstrap_command=command)
