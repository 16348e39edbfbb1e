"""Timeouts and switches, each overridable by an environment variable."""

from __future__ import annotations

import os

__all__ = ["env_float", "HOST_START_TIMEOUT", "PROC_START_TIMEOUT", "STOP_TIMEOUT", "CONNECT_TIMEOUT"]


def env_float(name: str, default: float) -> float:
    """``float(os.environ[name])`` or ``default``.

    Raises:
        ValueError: the variable is set but not a number (names the variable).
    """
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} must be a number of seconds") from None


def HOST_START_TIMEOUT() -> float:
    """Seconds a host agent may take to connect back (``TETRARCH_HOST_START_TIMEOUT``)."""
    return env_float("TETRARCH_HOST_START_TIMEOUT", 60.0)


def PROC_START_TIMEOUT() -> float:
    """Seconds a proc may take to report ready (``TETRARCH_PROC_START_TIMEOUT``)."""
    return env_float("TETRARCH_PROC_START_TIMEOUT", 60.0)


def STOP_TIMEOUT() -> float:
    """Seconds a graceful stop may take before processes are killed (``TETRARCH_STOP_TIMEOUT``)."""
    return env_float("TETRARCH_STOP_TIMEOUT", 10.0)


def CONNECT_TIMEOUT() -> float:
    """Seconds to dial and authenticate a peer (``TETRARCH_CONNECT_TIMEOUT``)."""
    return env_float("TETRARCH_CONNECT_TIMEOUT", 10.0)
