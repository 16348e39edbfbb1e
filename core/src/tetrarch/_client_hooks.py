"""What starts with the client's runtime: hooks an upper layer installs (the admin server's start).

The process layer may not import the layers above it; ``tetrarch/__init__`` installs here
what must run once the client's runtime exists (:func:`tetrarch.admin.serve` when the
``admin`` setting is on), and the process layer runs them (:func:`client_started`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._log import get_logger

__all__ = ["client_started", "on_client_start"]

_log = get_logger("runtime")
_hooks: list[Callable[[Any], None]] = []


def on_client_start(hook: Callable[[Any], None]) -> None:
    """Run ``hook(root)`` each time a client runtime starts (installed once per hook)."""
    if hook not in _hooks:
        _hooks.append(hook)


def client_started(root: Any) -> None:
    """The client's runtime ``root`` started: run the hooks; one that fails is logged, never raised."""
    for hook in list(_hooks):
        try:
            hook(root)
        except Exception as exc:  # noqa: BLE001 - the program runs on without what the hook starts
            _log.warning("%s", exc)
