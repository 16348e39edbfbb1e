"""Scenario: one pass of the kernel suite on the transport named by ``TETRARCH_TRANSPORT``.

``python kernel_pass.py [PYTEST_ARGS...]`` runs pytest on tests/kernel (which holds the
examples' tests too), leaving out the tests marked ``transport_independent`` (they ran
in the main pass already) and ``stress`` (``make test-stress`` runs them, on the default
transport), from the repository root so that pytest.ini applies.
Exits with pytest's status.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def main() -> int:
    os.chdir(ROOT)
    args = ["tests/kernel", "-m", "not transport_independent and not stress", "-p", "no:cacheprovider", "-rfEs",
            "--transports=none", *sys.argv[1:]]
    return int(pytest.main(args))


if __name__ == "__main__":
    sys.exit(main())
