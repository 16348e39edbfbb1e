"""``python -m benchmarks`` (from the repository root): the benchmark suite (``_suite.py``; ``--help``).

The benchmark modules import each other by their bare names (``from _baselines import
Peer``), as when run as scripts: this folder goes first on ``sys.path``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _suite import main

if __name__ == "__main__":
    sys.exit(main())
