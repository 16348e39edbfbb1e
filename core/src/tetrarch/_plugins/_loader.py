"""Load plugins one by one, so one broken plugin never hides the others.

pluggy's ``load_setuptools_entrypoints`` stops at the first entry point that raises;
here each entry point is imported, registered and asked for its backends on its own,
and whatever goes wrong is kept on a :class:`PluginRecord` (reason and traceback).
"""

from __future__ import annotations

import enum
import re
import traceback as _traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pluggy

from .._config import SETTINGS, TEST_SETTINGS, Setting
from .._errors import ArgumentError, ArgumentTypeError
from . import _dists
from ._api import API_ATTRIBUTE, check_api
from ._errors import PluginLoadError
from ._hookspecs import PROJECT
from ._known import normalize_dist
from ._specs import BackendKind, BackendSpec, Status

if TYPE_CHECKING:  # pragma: no cover - importing it costs a process's start (see _dists)
    import importlib.metadata

__all__ = [
    "DISABLED_REASON",
    "ENTRY_POINT_GROUP",
    "STATUS_OF_STATE",
    "PluginRecord",
    "PluginSource",
    "PluginState",
    "load_entry_points",
    "register_plugin",
]

ENTRY_POINT_GROUP = PROJECT
DISABLED_REASON = "disabled by TETRARCH_DISABLE_PLUGINS"

#: The hooks that return backends, and the kind each must return.
BACKEND_HOOKS: tuple[tuple[str, BackendKind], ...] = (
    ("tetrarch_transports", BackendKind.TRANSPORT),
    ("tetrarch_rdma_backends", BackendKind.RDMA),
    ("tetrarch_allocators", BackendKind.ALLOCATOR),
)

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_FACTORY_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class PluginState(str, enum.Enum):
    """How loading one plugin went."""

    LOADED = "loaded"
    BROKEN = "broken"  # import, registration or a backend hook raised / returned garbage
    DISABLED = "disabled"  # skipped because of TETRARCH_DISABLE_PLUGINS
    INCOMPATIBLE = "incompatible"  # written for another plugin API version (never registered)


#: The status of the backends of a plugin that did not load, by how loading it went.
STATUS_OF_STATE: dict[PluginState, Status] = {
    PluginState.BROKEN: Status.BROKEN,
    PluginState.DISABLED: Status.DISABLED,
    PluginState.INCOMPATIBLE: Status.INCOMPATIBLE,
}


@dataclass(frozen=True, slots=True)
class PluginSource:
    """A plugin object given to :class:`Registry` directly instead of by entry point.

    Used for core's builtins and by tests, which can pose as any distribution. Its
    plugin API version is ``plugin``'s ``tetrarch_plugin_api`` attribute, as for an entry
    point module (core's own builtins are not checked).
    """

    plugin: object
    name: str
    distribution: str
    version: str = "0"


@dataclass(frozen=True, slots=True)
class PluginRecord:
    """One plugin (entry point or injected object) and what loading it gave: ``reason`` says
    why it did not load, ``remedy`` what to do about it."""

    name: str
    distribution: str
    version: str
    state: PluginState
    target: str = ""  # the entry point's value, e.g. "tetrarch_transport_zmq._plugin"
    reason: str = ""  # one line
    remedy: str = ""
    traceback: str = ""
    specs: tuple[BackendSpec, ...] = field(default=())
    #: The plugin API version it declares (``tetrarch_plugin_api``); ``""``: none (taken as ``"1.0"``).
    api: str = ""
    #: The settings it declares (hook ``tetrarch_settings``), in its order.
    settings: tuple[Setting[Any], ...] = field(default=())

    @property
    def hint(self) -> str:
        """Deprecated alias of :attr:`remedy` (its name before plugin API 1.2), kept for code reading it."""
        return self.remedy


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."


#: The spec type each kind's hook returns (plugins of plugin API 1.0/1.1 return their base, ``BackendSpec``).
_SPEC_TYPE = {BackendKind.TRANSPORT: "TransportSpec", BackendKind.RDMA: "RdmaBackendSpec",
              BackendKind.ALLOCATOR: "AllocatorSpec"}


def _validate(obj: object, kind: BackendKind, hook: str) -> BackendSpec:
    if not isinstance(obj, BackendSpec):
        raise ArgumentTypeError(f"{hook}() returned {obj!r}, not a tetrarch.plugins.{_SPEC_TYPE[kind]}")
    if obj.kind is not kind:
        raise ArgumentError(f"{hook}() returned a {obj.kind.value} backend {obj.name!r}; expected kind {kind.value}")
    if not isinstance(obj.name, str) or not _NAME_RE.fullmatch(obj.name):
        raise ArgumentError(f"{hook}() returned an invalid backend name {obj.name!r} (letters, digits, _ . -)")
    if not isinstance(obj.factory, str) or not _FACTORY_RE.fullmatch(obj.factory):
        raise ArgumentError(f"backend {obj.name!r}: factory {obj.factory!r} is not a 'package.module:Name' string")
    if obj.probe is not None and not callable(obj.probe):
        raise ArgumentTypeError(f"backend {obj.name!r}: probe {obj.probe!r} is not callable")
    return obj


def _collect_specs(pm: pluggy.PluginManager, plugin: object) -> tuple[BackendSpec, ...]:
    """Ask only ``plugin``'s implementations of the backend hooks for their specs."""
    for caller in pm.get_hookcallers(plugin) or ():
        if caller.spec is None:
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and not impl.optionalhook:
                    raise AttributeError(f"unknown hook {caller.name!r} (misspelt? see tetrarch.plugins)")
    specs: list[BackendSpec] = []
    for hook, kind in BACKEND_HOOKS:
        for impl in getattr(pm.hook, hook).get_hookimpls():
            if impl.plugin is not plugin or impl.hookwrapper or impl.wrapper:
                continue
            result = impl.function()
            specs.extend(_validate(obj, kind, hook) for obj in (result or ()))
    return tuple(specs)


def _collect_settings(pm: pluggy.PluginManager, plugin: object) -> tuple[Setting[Any], ...]:
    """``plugin``'s own ``tetrarch_settings`` answer, checked: Setting records, keys unique and not core's."""
    found: dict[str, Setting[Any]] = {}
    for impl in pm.hook.tetrarch_settings.get_hookimpls():
        if impl.plugin is not plugin or impl.hookwrapper or impl.wrapper:
            continue
        for obj in cast(Iterable[object], impl.function() or ()):
            if not isinstance(obj, Setting):
                raise ArgumentTypeError(f"tetrarch_settings() returned {obj!r}, not a tetrarch.plugins.Setting")
            if obj.key in SETTINGS or obj.key in TEST_SETTINGS or obj.key in found:
                raise ArgumentError(f"tetrarch_settings() declares {obj.key!r} twice or over core's setting")
            found[obj.key] = obj
    return tuple(found.values())


def _broken(
    name: str, dist: str, version: str, target: str, stage: str, exc: BaseException, strict: bool
) -> PluginRecord:
    reason = f"{stage}: {_one_line(exc)}"
    tb = "".join(_traceback.format_exception(type(exc), exc, exc.__traceback__))
    if strict:
        raise PluginLoadError(
            f"tetrarch plugin {name!r} from {dist} {version} failed to load ({reason}); "
            "unset TETRARCH_PLUGINS_STRICT to skip it, or add it to TETRARCH_DISABLE_PLUGINS",
            plugin=name,
            distribution=dist,
            traceback=tb,
        ) from exc
    return PluginRecord(
        name, dist, version, PluginState.BROKEN, target, reason,
        f"see `tetrarch plugins --verbose` for the traceback; reinstall {dist} or "
        f"add it to TETRARCH_DISABLE_PLUGINS",
        tb,
    )


def _refused(source: PluginSource, target: str, state: PluginState, reason: str, remedy: str,
             strict: bool) -> PluginRecord:
    if strict:
        raise PluginLoadError(
            f"tetrarch plugin {source.name!r} from {source.distribution} {source.version} was not loaded "
            f"({reason}); {remedy}; or unset TETRARCH_PLUGINS_STRICT",
            plugin=source.name,
            distribution=source.distribution,
        )
    return PluginRecord(source.name, source.distribution, source.version, state, target, reason, remedy)


def register_plugin(
    pm: pluggy.PluginManager, source: PluginSource, *, strict: bool, target: str = ""
) -> PluginRecord:
    """Check the plugin API version ``source.plugin`` declares, then register it and collect its
    backends; a failure unregisters it.

    A plugin written for an incompatible API is not registered (its hooks are never
    called) and comes back ``INCOMPATIBLE``; a malformed declaration makes it ``BROKEN``.
    A plugin that declares none loads (``api`` empty), unless ``strict``.

    Raises:
        PluginLoadError: ``strict`` is set and the plugin failed, is incompatible, or
            declares no plugin API version (checked last: a broken plugin says so first).
    """
    check = None
    if normalize_dist(source.distribution) != "tetrarch":  # core's builtins are core's own API
        check = check_api(source.plugin, source.distribution)
        if check.malformed:
            return _refused(source, target, PluginState.BROKEN, check.reason, check.remedy, strict)
        if not check.ok:
            return _refused(source, target, PluginState.INCOMPATIBLE, check.reason, check.remedy, strict)
    pname = f"{source.distribution}:{source.name}"
    try:
        pm.register(source.plugin, name=pname)
    except Exception as exc:  # noqa: BLE001 - recorded
        return _broken(source.name, source.distribution, source.version, target, "cannot register", exc, strict)
    try:
        specs = _collect_specs(pm, source.plugin)
        settings = _collect_settings(pm, source.plugin)
    except Exception as exc:  # noqa: BLE001 - recorded
        pm.unregister(source.plugin)
        return _broken(source.name, source.distribution, source.version, target, "its hooks failed", exc, strict)
    if strict and check is not None and not check.declared:
        pm.unregister(source.plugin)  # strict: _refused raises PluginLoadError
        _refused(source, target, PluginState.INCOMPATIBLE, f"it declares no {API_ATTRIBUTE}",
                 f'add {API_ATTRIBUTE} = "{check.version}" (the plugin API version it was written for) to '
                 f"{target or 'its plugin module'}", strict=True)
    return PluginRecord(source.name, source.distribution, source.version, PluginState.LOADED, target, specs=specs,
                        api=check.declared if check is not None else "", settings=settings)


def disabled_match(disabled: frozenset[str], name: str, distribution: str) -> str | None:
    """The TETRARCH_DISABLE_PLUGINS entry that matches this plugin, if any."""
    for token in (name, normalize_dist(distribution)):
        if token in disabled:
            return token
    return None


def _disabled(name: str, dist: str, version: str, target: str, token: str) -> PluginRecord:
    return PluginRecord(
        name, dist, version, PluginState.DISABLED, target, DISABLED_REASON,
        f"remove {token!r} from TETRARCH_DISABLE_PLUGINS to use it",
    )


def load_entry_points(
    pm: pluggy.PluginManager,
    *,
    disabled: frozenset[str],
    strict: bool,
    entry_points: Callable[[], Iterable[importlib.metadata.EntryPoint]] | None = None,
) -> list[PluginRecord]:
    """Import and register every entry point of group ``tetrarch``, one at a time.

    ``disabled`` holds normalised distribution names and entry point names to skip.

    Raises:
        PluginLoadError: ``strict`` is set and a plugin failed.
    """
    # _dists lists what importlib.metadata.entry_points(group=...) does, without importing it
    eps: Iterable[importlib.metadata.EntryPoint | _dists.EntryPoint] = (
        _dists.entry_points(ENTRY_POINT_GROUP) if entry_points is None else entry_points())
    records: list[PluginRecord] = []
    for ep in sorted(eps, key=lambda e: ((e.dist.name if e.dist else ""), e.name)):
        dist = ep.dist.name if ep.dist is not None else "(unknown distribution)"
        version = (ep.dist.version if ep.dist is not None else "") or "unknown"
        token = disabled_match(disabled, ep.name, dist)
        if token is not None:
            records.append(_disabled(ep.name, dist, version, ep.value, token))
            continue
        try:
            plugin = ep.load()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - recorded, others still load
            records.append(_broken(ep.name, dist, version, ep.value, f"cannot import {ep.value}", exc, strict))
            continue
        source = PluginSource(plugin, ep.name, dist, version)
        records.append(register_plugin(pm, source, strict=strict, target=ep.value))
    return records


def load_sources(
    pm: pluggy.PluginManager, sources: Iterable[PluginSource], *, disabled: frozenset[str], strict: bool
) -> list[PluginRecord]:
    """Register plugin objects handed over directly (builtins, tests)."""
    records: list[PluginRecord] = []
    for source in sources:
        core = source.distribution == "tetrarch"
        token = None if core else disabled_match(disabled, source.name, source.distribution)
        if token is not None:
            records.append(_disabled(source.name, source.distribution, source.version, "", token))
        else:
            records.append(register_plugin(pm, source, strict=strict))
    return records
