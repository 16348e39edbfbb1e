"""Which allocator starts the host agents of a host mesh, chosen by the plugin registry's rules.

Both entry points go through :meth:`tetrarch._plugins.Registry.select`, the code path
every backend kind uses (docs/plugins.md §4): an explicit name, then the ``allocator``
setting (``configure(allocator=...)`` / ``TETRARCH_ALLOCATOR``), then the
``tetrarch_select_backend`` hooks, then priority. Neither ever names a backend itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..._config import ALLOCATOR
from ..._plugins import (
    BackendKind,
    BackendSpec,
    BackendStatus,
    BackendUnavailable,
    Capability,
    SelectionRequest,
    Status,
    get_registry,
)

__all__ = ["SAME_HOST", "job_allocator", "this_host_allocator"]

#: The capability of an allocator whose host agents run on this machine (``this_host()`` needs it).
SAME_HOST = Capability.SAME_HOST
#: The allocator ``this_host()`` gets by default; it comes with ``tetrarch-alloc-local``, a dependency of tetrarch.
LOCAL = "local"
_KIND = BackendKind.ALLOCATOR


def job_allocator(name: str | None, meshes: Mapping[str, int]) -> str:
    """The allocator backend a job uses: ``name``, else the setting, else the hooks and priority.

    A ``tetrarch_select_backend`` hook sees ``meshes`` (mesh name -> hosts) as ``request.meshes``.

    Raises:
        BackendNotFound: no allocator of that name is installed (the message lists the
            installed ones and, for a first-party one, the ``pip install "tetrarch[X]"`` hint).
        BackendUnavailable: the chosen allocator cannot run here, or none is available.
        ConfigError: ``TETRARCH_ALLOCATOR`` holds no valid value.
    """
    return get_registry().select(_KIND, name, request=SelectionRequest(_KIND, meshes=meshes)).name


def this_host_allocator() -> str:
    """The allocator ``this_host()`` starts its host agent with: one having ``same-host``.

    A choice made with ``TETRARCH_ALLOCATOR`` (or ``configure(allocator=...)``) is used
    when that allocator can start hosts on this machine, and refused with an error
    otherwise; it is never silently replaced. Without a choice, the hooks and priority
    pick among the available allocators having ``same-host``.

    Raises:
        BackendNotFound: the setting names no installed allocator.
        BackendUnavailable: the setting names an allocator without ``same-host`` (e.g.
            ``slurm``; the message names ``tetrarch.job.AllocatorJob`` and unsetting the
            variable), the named one cannot run here, no same-host allocator is
            available (when ``tetrarch-alloc-local`` is missing, the message says
            ``pip install tetrarch-alloc-local``), or a policy hook chose one without ``same-host``.
    """
    registry = get_registry()
    value, source = ALLOCATOR.lookup()
    if value:
        where = f"configure(allocator={value!r})" if source == "code" else f"{ALLOCATOR.env}={value}"
        spec = next((r.spec for r in registry.statuses(_KIND) if r.name == value and r.spec is not None), None)
        if spec is not None and SAME_HOST not in spec.capabilities:
            raise _not_this_machine(spec, where, _same_host_names())
    try:
        spec = registry.select(_KIND, None, request=SelectionRequest(_KIND, require=frozenset({SAME_HOST})))
    except BackendUnavailable as exc:
        missing = _local_missing()
        if missing is None:
            raise
        raise BackendUnavailable(f"this_host() starts its host agent with the 'local' allocator, but "
                                 f"{missing.reason} (tetrarch depends on it; was it uninstalled, or tetrarch "
                                 f"installed with --no-deps?): {missing.remedy}. {exc}", kind=_KIND, name=LOCAL,
                                 reason=missing.reason, remedy=missing.remedy) from exc
    if SAME_HOST not in spec.capabilities:
        raise BackendUnavailable(
            f"a tetrarch_select_backend hook chose allocator {spec.name!r} for this_host(), but it cannot start "
            f"hosts on this machine (no '{SAME_HOST}' capability); the hook must honour request.require",
            kind=_KIND, name=spec.name, reason=f"it lacks the '{SAME_HOST}' capability",
            remedy="a bug in the plugin of that hook: report it, or disable it (TETRARCH_DISABLE_PLUGINS)",
        )
    return spec.name


def _local_missing() -> BackendStatus | None:
    """The ``local`` allocator's row when its distribution (``tetrarch-alloc-local``) is not installed, else None."""
    return next((r for r in get_registry().statuses(_KIND) if r.name == LOCAL and r.status is Status.NOT_INSTALLED),
                None)


def _same_host_names() -> list[str]:
    """The names of the available allocators that can start hosts on this machine."""
    return sorted(r.name for r in get_registry().statuses(_KIND)
                  if r.spec is not None and r.status is Status.AVAILABLE and SAME_HOST in r.spec.capabilities)


def _not_this_machine(spec: BackendSpec, where: str, same_host: list[str]) -> BackendUnavailable:
    instead = ", ".join(same_host) or "none is available"
    remedy = (f"to get hosts from {spec.name!r}, use a job: tetrarch.job.AllocatorJob({{'hosts': N}}, "
              f"allocator={spec.name!r}).state().hosts; to use this machine, unset {ALLOCATOR.env} or set it to an "
              f"allocator with '{SAME_HOST}' ({instead})")
    return BackendUnavailable(
        f"this_host() is this machine, but {where} chose allocator {spec.name!r}, which cannot start hosts on it "
        f"(it lacks the '{SAME_HOST}' capability). {remedy[0].upper()}{remedy[1:]}", kind=_KIND, name=spec.name,
        reason=f"it lacks the '{SAME_HOST}' capability: it cannot start hosts on this machine", remedy=remedy,
    )
