"""Scenario: ``this_host().spawn_procs(per_host={"gpus": GPUS})`` in a fresh client.

``python spawn_procs.py GPUS``. A ``ProcessStartError`` is printed (``RC <returncode>``,
then the error) and the client exits 0; any other error ends it with a traceback. The
procs, if they started, are left to the client's exit. Run by ``test_lifecycle.py``.
"""

from __future__ import annotations

import sys

from tetrarch import ProcessStartError, this_host


def main(gpus: int) -> None:
    try:
        this_host().spawn_procs(per_host={"gpus": gpus})
    except ProcessStartError as err:
        print("RC", err.returncode)
        print(err)


if __name__ == "__main__":
    main(int(sys.argv[1]))
