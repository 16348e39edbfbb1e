"""Where tetrarch keeps a user's files by default: one folder per kind under the user's runtime folder."""

from __future__ import annotations

import os

# At the top, not where it is used: the client's exit writes telemetry under these folders, and on
# CPython 3.11 a module that builds a namedtuple or dataclass (urllib.parse, which pathlib imports)
# first imported while the interpreter exits after an unhandled Ctrl-C turns the exit status
# -SIGINT into 1: the eval() those use clears the interpreter's "unhandled KeyboardInterrupt" flag
# (test_readable_failures' Ctrl-C tests).
from pathlib import Path

__all__ = ["user_dir"]


def user_dir(kind: str) -> Path:
    """``$XDG_RUNTIME_DIR/tetrarch/<kind>`` when that folder exists and is writable, else
    ``~/.cache/tetrarch/<kind>`` (neither is created here)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK):
        return Path(runtime) / "tetrarch" / kind
    return Path.home() / ".cache" / "tetrarch" / kind
