"""The settings plugins declare (hook ``tetrarch_settings``), as :mod:`tetrarch._config` sees them.

A plugin returns :class:`~tetrarch._config.Setting` records from its ``tetrarch_settings``
hook; the plugin registry keeps them on the plugin's :class:`PluginRecord`. Here they are
read from the process-wide registry (loaded on first need), so that ``configure()``,
``config_env()``, ``tetrarch config`` and the generated docs treat them as core's.

A setting of a first-party plugin that is not installed is simply unknown;
:data:`FIRST_PARTY_SETTINGS` only lets the error say which distribution would declare it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: A ``tetrarch._config.Setting`` (not imported: that module imports this one).
Setting = Any

__all__ = ["FIRST_PARTY_SETTINGS", "absent_owner", "install_provider", "plugin_settings", "settings_by_owner"]

#: The settings of tetrarch's own plugin distributions, by key: (distribution, extra). A test
#: checks this agrees with what each installed first-party plugin declares.
FIRST_PARTY_SETTINGS: Mapping[str, tuple[str, str]] = {
    "rdma_device": ("tetrarch-rdma-verbs", "verbs"),
    "rdma_chunk_size": ("tetrarch-rdma-verbs", "verbs"),
    "verbs_max_wr": ("tetrarch-rdma-verbs", "verbs"),
    "efa_provider": ("tetrarch-rdma-efa", "efa"),
    "efa_allow_unchecked_access": ("tetrarch-rdma-efa", "efa"),
}

#: Returns the loaded plugins' settings; installed by ``tetrarch/__init__`` (this foundation
#: module may not import the plugin layer: :mod:`tetrarch._plugins._settings` reads the registry).
_provider: Callable[[], dict[str, tuple[str, Setting]]] | None = None


def install_provider(provider: Callable[[], dict[str, tuple[str, Setting]]]) -> None:
    """Where :func:`plugin_settings` gets the plugins' settings from (the package does it at import)."""
    global _provider
    _provider = provider


def plugin_settings() -> dict[str, tuple[str, Setting]]:
    """Every setting the process-wide registry's loaded plugins declare: key -> (distribution, setting).

    Loads the registry on first use (:func:`tetrarch._plugins._settings.plugin_settings`);
    empty before a provider is installed.
    """
    return _provider() if _provider is not None else {}


def settings_by_owner() -> dict[str, list[Setting]]:
    """The plugins' settings grouped by the distribution that declares them, in declaration order."""
    grouped: dict[str, list[Setting]] = {}
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
