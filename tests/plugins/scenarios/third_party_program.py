"""Scenario: an actor program over whichever transport the environment selects (a fresh client).

Spawns two procs on ``this_host()``, calls an actor in each, stops them, and prints one
JSON line: the client's transport and address, and what each proc reports of its own
(``transport_actors.Where``). Run by ``test_plugin_third_party.py`` with a third-party
plugin on ``PYTHONPATH`` and ``TETRARCH_TRANSPORT`` or ``TETRARCH_LISTEN_ADDRESS`` set.
"""

from __future__ import annotations

import json

from transport_actors import Where

from tetrarch import this_host
from tetrarch._runtime.process._root import get_root


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="third_party")
    where = procs.spawn("where", Where)
    reports = list(where.transport.call().get().values())
    echoes = list(where.echo.call("over the wire").get().values())
    procs.stop().get()
    root = get_root()
    print(json.dumps({"client": {"transport": root.transport_name, "address": root.router.address},
                      "procs": reports, "echoes": echoes}))


if __name__ == "__main__":
    main()
