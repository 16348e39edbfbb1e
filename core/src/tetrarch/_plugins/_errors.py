"""Errors of the plugin layer. Each message carries the fix (extra, switch, choices).

:class:`BackendNotFound` and :class:`BackendUnavailable` carry the same facts as
fields, for code that acts on them rather than printing them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import TetrarchError

if TYPE_CHECKING:  # pragma: no cover
    from ._specs import BackendKind

__all__ = ["BackendNotFound", "BackendUnavailable", "PluginLoadError"]


class _BackendError(TetrarchError):
    """What :class:`BackendNotFound` and :class:`BackendUnavailable` share: a message that says
    it all, the fix included, and fields that repeat its parts (they survive pickling).

    Attributes:
        kind: the kind of backend asked for (a :class:`BackendKind`), or None where unknown.
        name: the backend's name, or None when none was chosen (an automatic selection).
        reason: why it cannot be used, in a phrase ("tetrarch-transport-zmq is not installed").
        remedy: what to do about it (``pip install "tetrarch[zmq]"``), or "" when there is nothing to do.
    """

    def __init__(self, message: str, *, kind: BackendKind | None = None, name: str | None = None,
                 reason: str = "", remedy: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.name = name
        self.reason = reason
        self.remedy = remedy


class BackendNotFound(_BackendError, LookupError):
    """No installed plugin provides a backend of that kind and name.

    The message lists the installed backends of the kind and, for a first-party
    backend, the ``pip install "tetrarch[X]"`` command that installs it (its ``remedy``;
    or, when its code is not written yet, says so instead).
    """


class BackendUnavailable(_BackendError, RuntimeError):
    """The backend is installed but cannot be used here.

    It is not implemented yet, its probe failed, its plugin is broken or disabled, two
    distributions register it, or its factory cannot be imported. The message gives the
    reason and remedy (also its fields).
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
