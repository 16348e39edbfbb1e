"""Scenario: ``tetrarch plugins --json`` in a fresh interpreter, then which heavy libraries it imported.

Prints ``HEAVY <sorted list>`` of the top-level modules among zmq, pynng, pyverbs, torch
and numpy that listing the plugins imported (it should import none). Run by
``test_plugin_firstparty.py``.
"""

from __future__ import annotations

import sys

from tetrarch._cli import main as cli_main

HEAVY = ("zmq", "pynng", "pyverbs", "torch", "numpy")


def main() -> None:
    assert cli_main(["plugins", "--json"]) == 0
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
    print("HEAVY", heavy)


if __name__ == "__main__":
    main()
