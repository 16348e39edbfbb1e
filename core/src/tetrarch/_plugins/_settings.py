"""The settings the loaded plugins declare (hook ``tetrarch_settings``), read from the process-wide registry.

:mod:`tetrarch._config_plugins` (foundation) cannot import the plugin layer; the package
installs :func:`plugin_settings` there as its provider (``tetrarch/__init__``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _registry

if TYPE_CHECKING:  # pragma: no cover
    from .._config import Setting

__all__ = ["plugin_settings"]

_cache: tuple[object, dict[str, tuple[str, Setting[Any]]]] | None = None


def plugin_settings() -> dict[str, tuple[str, Setting[Any]]]:
    """Every setting the process-wide registry's loaded plugins declare: key -> (distribution, setting).

    Loads the registry on first use. Empty while that registry is being built (a plugin
    module that asks for a setting at import sees only core's) or when it cannot load.
    Two plugins declaring one key: the first distribution by name keeps it (the registry
    reports the other as broken only when it declares a core key).
    """
    global _cache

    registry = _registry._registry
    if registry is None:
        if _registry._registry_lock.locked():
            return {}
        try:
            registry = _registry.get_registry()
        except Exception:  # noqa: BLE001 - strict loading failed: `tetrarch plugins` says why
            return {}
    cached = _cache
    if cached is not None and cached[0] is registry:
        return cached[1]
    found: dict[str, tuple[str, Setting[Any]]] = {}
    for record in registry.plugins():
        for setting in record.settings:
            found.setdefault(setting.key, (record.distribution, setting))
    _cache = (registry, found)
    return found
