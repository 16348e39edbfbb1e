"""Modules a proc has imported before its first actor: the ``preload`` setting (``spawn_procs(preload=...)``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable

from ..._config import PRELOAD
from ..._log import get_logger

__all__ = ["preload"]

_log = get_logger("proc")


def preload(modules: Iterable[str] | None = None) -> list[str]:
    """Import ``modules`` (default: the ``preload`` setting's) not imported yet; the names it imported.

    A module that fails to import is logged, not raised: the actor that needs it reports
    the error when it imports it itself.
    """
    done = []
    for name in PRELOAD() if modules is None else modules:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - reported where it is needed
            _log.warning("could not preload %s: %s: %s", name, type(exc).__name__, exc)
        else:
            done.append(name)
    return done
