"""Timeouts and switches, each overridable by an environment variable."""

from __future__ import annotations

import os

__all__ = ["env_float", "HOST_START_TIMEOUT", "PROC_START_TIMEOUT", "STOP_TIMEOUT", "CONNECT_TIMEOUT",
           "CLEANUP_TIMEOUT", "HEARTBEAT_INTERVAL", "ORPHAN_TIMEOUT", "CONFIG_VARS", "config_env"]

#: The variables below; a spawner passes its values to the procs it starts, so a
#: setting made in the client (even after its host agents started) applies to them.
CONFIG_VARS = ("TETRARCH_HOST_START_TIMEOUT", "TETRARCH_PROC_START_TIMEOUT", "TETRARCH_STOP_TIMEOUT",
               "TETRARCH_CONNECT_TIMEOUT", "TETRARCH_CLEANUP_TIMEOUT", "TETRARCH_HEARTBEAT_INTERVAL",
               "TETRARCH_ORPHAN_TIMEOUT")


def config_env() -> dict[str, str]:
    """This process's settings of :data:`CONFIG_VARS`."""
    return {k: os.environ[k] for k in CONFIG_VARS if k in os.environ}


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


def CLEANUP_TIMEOUT() -> float:
    """Seconds an actor's ``__cleanup__`` may run during a stop (``TETRARCH_CLEANUP_TIMEOUT``)."""
    return env_float("TETRARCH_CLEANUP_TIMEOUT", 5.0)


def HEARTBEAT_INTERVAL() -> float:
    """Seconds between a proc's (or host agent's) pings of its owner (``TETRARCH_HEARTBEAT_INTERVAL``)."""
    return env_float("TETRARCH_HEARTBEAT_INTERVAL", 1.0)


def ORPHAN_TIMEOUT() -> float:
    """Seconds without an answer from its owner after which a proc or host agent exits
    (``TETRARCH_ORPHAN_TIMEOUT``).

    A dead owner's connections drop at once (and same-host children get a parent-death
    signal), so this bound only matters when the owner hangs or its host is cut off.
    Long enough that an owner whose Python threads stall (a C call holding the GIL)
    is not mistaken for a dead one.
    """
    return env_float("TETRARCH_ORPHAN_TIMEOUT", 30.0)
