"""A ProcessJob whose telemetry is queried: metric points (TETRARCH_METRICS=1, with no collector),
spans published by an actor and the client, a bad query, a host agent that does not answer
(stopped). Prints JSON lines starting with ``{``."""

import json
import os
import signal
import threading
import time
import warnings

from tetrarch import Actor, TetrarchError, endpoint
from tetrarch._telemetry import SpanRecord, publish_span
from tetrarch.job import ProcessJob

TRACE = 0xABC


class Spanner(Actor):
    @endpoint
    def receive(self, parent: int) -> int:
        """A ``receive`` span of TRACE, as the trace work publishes one (here by hand)."""
        now = time.time_ns()
        publish_span(SpanRecord(TRACE, 0x51, parent, "receive", now - 1000, now, os.getpid(),
                                threading.get_native_id(), {"mesh": "spanner", "endpoint": "receive", "rank": 0}))
        return os.getpid()


def poll(job: ProcessJob, sql: str, until, bound: float = 60.0):
    deadline = time.monotonic() + bound
    while True:
        rows = job.telemetry.query(sql).to_pylist()
        if until(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)  # the procs' recorders hand rows over once a second: poll for them


def main() -> None:
    job = ProcessJob({"workers": 1, "spare": 1})
    procs = job.state().workers.spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("spanner", Spanner)
    now = time.time_ns()
    publish_span(SpanRecord(TRACE, 0x50, 0, "send", now, now + 5000, os.getpid(), threading.get_native_id(),
                            {"mesh": "spanner", "endpoint": "receive", "status": "ok"}))
    actor_pid = mesh.receive.call_one(0x50).get(timeout=60)
    t0 = time.monotonic()
    job.telemetry.query("SELECT 1")
    print(json.dumps({"first_query_s": time.monotonic() - t0}), flush=True)
    messages = poll(job, "SELECT sender_pid, receiver_pid, endpoint FROM messages", lambda r: bool(r))
    print(json.dumps({"messages": messages, "client": os.getpid(), "actor": actor_pid}), flush=True)
    points = poll(job, "SELECT DISTINCT name, pid FROM metric_points WHERE name = 'tetrarch.actor.calls'",
                  lambda r: any(p["pid"] == actor_pid for p in r))
    print(json.dumps({"points": points}), flush=True)
    try:
        job.telemetry.query("SELEC * FROM spans")
        print(json.dumps({"bad": None}), flush=True)
    except TetrarchError as exc:
        print(json.dumps({"bad": type(exc).__name__, "message": str(exc)}), flush=True)
    (spare,) = job.state().spare._ensure_started()
    os.kill(spare.pid, signal.SIGSTOP)  # its agent cannot answer: the query goes on without it
    try:
        tel = job.telemetry
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            t0 = time.monotonic()
            rows = tel.query("SELECT count(*) AS n FROM events", timeout=1.0).to_pylist()
            took = time.monotonic() - t0
    finally:
        os.kill(spare.pid, signal.SIGCONT)
    print(json.dumps({"missing": tel.missing, "spare": spare.address, "rows": rows, "took_s": took,
                      "warned": [str(w.message) for w in warned]}), flush=True)
    procs.stop().get(timeout=60)
    job.kill()


if __name__ == "__main__":
    main()
