"""One slowdown factor for every wall-clock bound in a test suite.

A bound that a slow machine can miss makes a flaky test. Tests write their bounds in
*nominal* seconds (what an idle developer machine needs, with a generous margin) and
pass them through :func:`scaled`; a loaded CI runner sets ``TETRARCH_TEST_SLOWDOWN``
(e.g. ``3``) and every bound grows by that one factor, so a hang is still caught.
"""

from __future__ import annotations

import math
import os

__all__ = ["SLOWDOWN_ENV", "scaled", "slowdown"]

#: The environment variable that holds the factor (a positive float; unset or empty means 1).
SLOWDOWN_ENV = "TETRARCH_TEST_SLOWDOWN"


def slowdown() -> float:
    """The factor in ``TETRARCH_TEST_SLOWDOWN``, or ``1.0`` when it is unset or empty.

    Read on every call, so a test may change the variable (``monkeypatch.setenv``) and
    processes started by the test inherit it.

    Raises:
        ValueError: the variable is set but is not a finite number greater than 0
            (the message names the variable and its value).
    """
    raw = os.environ.get(SLOWDOWN_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        factor = float(raw)
    except ValueError:
        factor = math.nan
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"environment variable {SLOWDOWN_ENV}={raw!r} must be a positive number "
                         f"(a factor for the test suite's time limits, e.g. 2.5)")
    return factor


def scaled(seconds: float) -> float:
    """``seconds`` (a nominal time limit) multiplied by :func:`slowdown`.

    Raises:
        ValueError: ``seconds`` is negative or not a number, or the factor is invalid.
    """
    if not seconds >= 0:  # also rejects NaN
        raise ValueError(f"a time limit must be a number of seconds >= 0, got {seconds!r}")
    return seconds * slowdown()
