"""Where tetrarch keeps a user's files by default: one folder per kind under the user's runtime folder."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["user_dir"]


def user_dir(kind: str) -> Path:
    """``$XDG_RUNTIME_DIR/tetrarch/<kind>`` when that folder exists and is writable, else
    ``~/.cache/tetrarch/<kind>`` (neither is created here)."""
    from pathlib import Path  # here: pathlib (and urllib, ipaddress) is not loaded by every process

    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK):
        return Path(runtime) / "tetrarch" / kind
    return Path.home() / ".cache" / "tetrarch" / kind
