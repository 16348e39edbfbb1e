"""Actor classes for the ``Actor.logger`` test (procs import this module by name)."""

from __future__ import annotations

import logging

from tetrarch import Actor, endpoint


class Chatty(Actor):
    """Logs through ``self.logger`` in ``__init__``, an endpoint and ``__cleanup__``."""

    def __init__(self) -> None:
        self.logger.info("init done")

    @endpoint
    def work(self) -> str:
        self.logger.info("working")
        logging.getLogger("app").warning("app says hi")  # any logger in the actor carries the context
        return self.logger.name

    def __cleanup__(self, exc: object) -> None:
        self.logger.info("cleanup")
