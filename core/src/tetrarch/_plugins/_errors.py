"""Errors of the plugin layer. Each message carries the fix (extra, switch, choices)."""

from __future__ import annotations

from .._errors import TetrarchError

__all__ = ["BackendNotFound", "BackendUnavailable", "PluginLoadError"]


class BackendNotFound(TetrarchError, LookupError):
    """No installed plugin provides a backend of that kind and name.

    The message lists the installed backends of the kind and, for a first-party
    backend, the ``pip install "tetrarch[X]"`` command that installs it (or, when its
    code is not written yet, says so instead).
    """


class BackendUnavailable(TetrarchError, RuntimeError):
    """The backend is installed but cannot be used here.

    It is not implemented yet, its probe failed, its plugin is broken or disabled, two
    distributions register it, or its factory cannot be imported. The message gives the reason and remedy.
    """


class PluginLoadError(TetrarchError, RuntimeError):
    """A plugin failed to load while ``TETRARCH_PLUGINS_STRICT=1`` was set.

    Attributes:
        plugin: the entry point (or injected plugin) name.
        distribution: the distribution that declares it.
        traceback: the formatted traceback of the original error.
    """

    def __init__(self, message: str, *, plugin: str, distribution: str, traceback: str = "") -> None:
        super().__init__(message)
        self.plugin = plugin
        self.distribution = distribution
        self.traceback = traceback
