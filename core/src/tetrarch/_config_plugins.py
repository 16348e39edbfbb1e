"""The settings plugins declare (hook ``tetrarch_settings``), as :mod:`tetrarch._config` sees them.

A plugin returns :class:`~tetrarch._config.Setting` records from its ``tetrarch_settings``
hook; the plugin registry keeps them on the plugin's :class:`PluginRecord`. Here they are
read from the process-wide registry (loaded on first need), so that ``configure()``,
``config_env()``, ``tetrarch config`` and the generated docs treat them as core's.

A setting of a first-party plugin that is not installed is simply unknown;
:data:`FIRST_PARTY_SETTINGS` only lets the error say which distribution would declare it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ._config import Setting

__all__ = ["FIRST_PARTY_SETTINGS", "absent_owner", "core_or_known", "known_settings", "plugin_settings",
           "settings_by_owner"]

#: The settings of tetrarch's own plugin distributions, by key: (distribution, extra). A test
#: checks this agrees with what each installed first-party plugin declares.
FIRST_PARTY_SETTINGS: Mapping[str, tuple[str, str]] = {
    "rdma_device": ("tetrarch-rdma-verbs", "verbs"),
    "rdma_chunk_size": ("tetrarch-rdma-verbs", "verbs"),
    "verbs_max_wr": ("tetrarch-rdma-verbs", "verbs"),
    "efa_provider": ("tetrarch-rdma-efa", "efa"),
    "efa_allow_unchecked_access": ("tetrarch-rdma-efa", "efa"),
}

_cache: tuple[object, dict[str, tuple[str, Setting[Any]]]] | None = None


def plugin_settings() -> dict[str, tuple[str, Setting[Any]]]:
    """Every setting the process-wide registry's loaded plugins declare: key -> (distribution, setting).

    Loads the registry on first use. Empty while that registry is being built (a plugin
    module that asks for a setting at import sees only core's) or when it cannot load.
    Two plugins declaring one key: the first distribution by name keeps it (the registry
    reports the other as broken only when it declares a core key).
    """
    global _cache
    from ._plugins import _registry  # lazily: the plugin layer imports this module's users

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


def known_settings() -> dict[str, Setting[Any]]:
    """Every setting by key: core's (``SETTINGS``), those the installed plugins declare (loads the
    plugin registry), then the test suite's (``TEST_SETTINGS``)."""
    from ._config import SETTINGS, TEST_SETTINGS  # lazily: that module imports this one

    return {**SETTINGS, **{key: s for key, (_, s) in plugin_settings().items()}, **TEST_SETTINGS}


def core_or_known(keys: Collection[str]) -> Mapping[str, Setting[Any]]:
    """Core's and the test suite's settings when they hold every key (no registry needed), else
    :func:`known_settings`."""
    from ._config import SETTINGS, TEST_SETTINGS

    if all(k in SETTINGS or k in TEST_SETTINGS for k in keys):
        return {**SETTINGS, **TEST_SETTINGS}
    return known_settings()


def settings_by_owner() -> dict[str, list[Setting[Any]]]:
    """The plugins' settings grouped by the distribution that declares them, in declaration order."""
    grouped: dict[str, list[Setting[Any]]] = {}
    for owner, setting in plugin_settings().values():
        grouped.setdefault(owner, []).append(setting)
    return grouped


def absent_owner(key: str) -> str:
    """For a first-party plugin's setting whose plugin is not loaded: which distribution declares it
    and how to install it; else ``""``."""
    known = FIRST_PARTY_SETTINGS.get(key)
    if known is None or key in plugin_settings():
        return ""
    dist, extra = known
    return f'declared by the plugin {dist}, which is not installed or not loaded: pip install "tetrarch[{extra}]"'
