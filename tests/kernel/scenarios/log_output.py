"""Scenario: where tetrarch's diagnostics go in a fresh client (argv[1]: unconfigured|configured|silenced)."""

from __future__ import annotations

import logging
import sys

from tetrarch._log import get_logger


def main(mode: str) -> int:
    if mode == "configured":
        logging.basicConfig(stream=sys.stdout, format="APP %(name)s %(levelname)s %(message)s")
    elif mode == "silenced":
        logging.getLogger("tetrarch").setLevel(logging.CRITICAL)
    get_logger("router").warning("rejected connection from %s: %s", "peer-1", "wrong secret")
    get_logger("router").info("an info line nobody asked for")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
