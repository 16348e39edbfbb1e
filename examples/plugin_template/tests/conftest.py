"""Makes the template importable from its source folder, so the repository's ``make test``
runs these tests without installing the template (an installed copy works the same)."""

from __future__ import annotations

import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
