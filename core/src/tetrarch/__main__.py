"""``python -m tetrarch``: the same as the ``tetrarch`` command."""

from __future__ import annotations

from tetrarch._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
