"""Scenario: ``Actor.logger`` records reach the client with the actor's context, run by ``test_actor_logger.py``.

Two procs of the mesh ``trainers`` at INFO; the actor mesh ``chatty`` logs in ``__init__``, an
endpoint and ``__cleanup__``; the client prints the logger's name, then ``CLIENT DONE`` after stop.
"""

from __future__ import annotations

import logging
import sys

from logger_actors import Chatty
from tetrarch import this_host


def main() -> None:
    pm = this_host().spawn_procs(per_host={"gpus": 2}, name="trainers")
    pm.logging_option(level=logging.INFO).get()
    chatty = pm.spawn("chatty", Chatty)
    print("LOGGER", chatty.work.call().get().item(gpus=0), flush=True)
    pm.stop().get()
    print("CLIENT DONE", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)
