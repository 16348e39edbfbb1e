"""The packaging tests run only when asked for: ``make test-packaging`` (``pytest -m packaging``).

They build the seven wheels and install them into fresh virtual environments: about a
minute on 2 cores (half of it unpacking torch), and the first run downloads the third-party
wheels (``.cache/wheels``), which ``make test`` must not need. CI (``.ci/run``) runs them
after ``make test``.
"""

from __future__ import annotations

import pytest

REASON = ("builds the seven wheels and installs them into fresh virtual environments (about a minute): "
          "run `make test-packaging` (pytest -m packaging)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "packaging" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason=REASON)
    for item in items:
        if item.get_closest_marker("packaging") is not None:
            item.add_marker(skip)
