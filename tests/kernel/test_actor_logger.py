"""``Actor.logger`` and the actor context of log records made inside actors (issue 30).

Runs ``scenarios/actor_logger.py`` as a fresh client: the records an actor logs (through
``self.logger`` and through any other logger) reach the client's stderr, forwarded with the
proc's prefix and led by ``[actor=<mesh>]``.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tetrarch import Actor
from tetrarch._runtime.services._output import ActorFormatter
from tetrarch._runtime.values import _context
from tetrarch._runtime.values._context import Instance, _current, _MessageInfo, actor_label, install_log_context
from tetrarch._runtime.values._shape import Extent, Point
from tetrarch.testing import scaled

pytestmark = [pytest.mark.timeout(scaled(90))]

Run = Callable[..., subprocess.CompletedProcess[str]]
HERE = Path(__file__).resolve().parent
SCENARIO = HERE / "scenarios" / "actor_logger.py"


class Plain(Actor):
    pass


def test_the_logger_is_named_after_the_class_and_can_be_replaced() -> None:
    a = Plain()
    assert a.logger is logging.getLogger("Plain") and a.logger is a.logger
    a.logger = logging.getLogger("mine")
    assert a.logger.name == "mine"


@pytest.mark.isolated
def test_records_logged_in_an_actor_reach_the_client_with_its_context(run_scenario: Run) -> None:
    res = run_scenario(SCENARIO, timeout=60, pythonpath=[HERE])
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert "LOGGER Chatty" in res.stdout.splitlines()
    assert res.stdout.splitlines()[-1] == "CLIENT DONE"
    err = res.stderr.splitlines()
    for r in range(2):
        for what in ("INFO:Chatty:init done", "INFO:Chatty:working", "WARNING:app:app says hi",
                     "INFO:Chatty:cleanup"):
            assert f"[trainers gpus={r}] [actor=chatty] {what}" in err, res.stderr


def test_the_record_factory_labels_records_only_inside_an_actor() -> None:
    previous = logging.getLogRecordFactory()
    install_log_context()
    try:
        fmt = ActorFormatter()
        outside = logging.getLogRecordFactory()("x", logging.INFO, __file__, 1, "hello", None, None)
        assert vars(outside)["actor"] == "" and fmt.format(outside) == "INFO:x:hello"
        inst = Instance("trainers", "id", "C", Point(1, Extent(["gpus"], [2])), "p")
        assert actor_label(inst) == "trainers[gpus=1]"
        token = _current.set(_MessageInfo(inst, 1, ("gpus",), (2,)))
        try:
            inside = logging.getLogRecordFactory()("x", logging.INFO, __file__, 1, "hello", None, None)
        finally:
            _current.reset(token)
        assert fmt.format(inside) == "[actor=trainers] INFO:x:hello"
    finally:  # leave this test process's logging as it was
        logging.setLogRecordFactory(previous)
        _context._installed[0] = False
