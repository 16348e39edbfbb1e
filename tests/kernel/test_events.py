"""Structured lifecycle events (``tetrarch._events``): procs, hosts, meshes and failures as records.

Events are INFO records of the ``tetrarch.events`` loggers with a ``tetrarch_event`` dict;
``TETRARCH_EVENT_LOG=json`` prints one JSON line per event; a failure cascade marks its root.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from supervision_actors import Fragile
from tetrarch import this_host
from tetrarch._events import LOGGER, SCHEMA, JsonFormatter
from tetrarch.testing import scaled

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(120))]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "tetrarch_event", None)
        if event is not None:
            self.events.append(event)


@pytest.fixture
def events() -> Iterator[list[dict[str, Any]]]:
    logger = logging.getLogger(LOGGER)
    handler, level = _Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.events
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_procs_and_meshes_report_their_lifecycle(events) -> None:
    pm = this_host().spawn_procs(per_host={"gpus": 2}, name="evented")
    mesh = pm.spawn("evented", Fragile)
    mesh.initialized.get(timeout=scaled(30))
    type(mesh).stop(mesh).get(timeout=scaled(30))
    pm.stop().get(timeout=scaled(60))
    kinds = [e["event"] for e in events]
    ready = [e for e in events if e["event"] == "proc.ready" and "evented" in e["name"]]
    exited = [e for e in events if e["event"] == "proc.exited" and "evented" in e["name"]]
    assert len(ready) == 2 and len(exited) == 2 and all(e["returncode"] == 0 for e in exited), events
    (spawned,) = [e for e in events if e["event"] == "mesh.spawned" and e["mesh"] == "evented"]
    assert spawned["actors"] == 2 and spawned["class"] == "supervision_actors.Fragile" and spawned["owner"] == "client"
    assert kinds.index("mesh.spawned") < kinds.index("mesh.stopped")
    for e in events:
        assert set(SCHEMA[e["event"]]) <= set(e), f"{e['event']} lacks fields of its schema: {e}"


def test_a_two_level_cascade_marks_its_root_cause_in_json_lines() -> None:
    here = Path(__file__).parent
    env = {**os.environ, "TETRARCH_EVENT_LOG": "json",
           "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, str(here / "scenarios" / "events_cascade.py")], env=env,
                         capture_output=True, text=True, timeout=scaled(120))
    assert res.returncode == 0 and "DONE sup_pass" in res.stdout, res.stderr[-3000:]
    lines = [ln[ln.index("{"):] for ln in (res.stdout + res.stderr).splitlines() if '{"event": ' in ln]
    failed = [e for e in map(json.loads, lines) if e["event"] == "actor.failed"]
    (root,) = [e for e in failed if e["root_cause"]]
    (caused,) = [e for e in failed if not e["root_cause"]]
    assert root["mesh"] == "fragile" and root["endpoint"] == "raise_exc" and root["chain"] == []
    assert caused["mesh"] == "sup_pass" and caused["endpoint"] == "__supervise__"
    assert caused["root"]["mesh"] == "fragile" and [c["mesh"] for c in caused["chain"]] == ["fragile"]
    assert root["pid"] != caused["pid"], "each is emitted where its failure is recorded: the owner's process"


def test_the_json_formatter_writes_any_record_as_one_object() -> None:
    record = logging.LogRecord("tetrarch.router", logging.WARNING, __file__, 1, "lost %s", ("x",), None)
    assert json.loads(JsonFormatter().format(record))["message"] == "lost x"
