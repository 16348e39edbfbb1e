"""Traces: spans of calls linked across processes, in a Perfetto trace file and through OTLP.

Each program runs in a subprocess (its settings are ``TETRARCH_*`` variables): the client calls
an actor of one proc, whose handler calls an actor of another proc (``scenarios/trace_calls.py``).
"""

from __future__ import annotations

import glob
import itertools
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otlp_receiver import dead_port, receiving
from tetrarch._runtime.values import _wire
from tetrarch.testing import scaled

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                         reason="the trace file needs perfetto: pip install \"tetrarch[trace]\"")

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(120))]

HERE = Path(__file__).parent
SCENARIO = str(HERE / "scenarios" / "trace_calls.py")


def _run(env: dict[str, str], *argv: str, cmd: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd or [sys.executable, SCENARIO, *argv], env={**os.environ, **env}, capture_output=True,
                         text=True, timeout=scaled(90))
    assert res.returncode == 0 and "DONE" in res.stdout, res.stderr[-3000:]
    return res


def _read(path: Path) -> dict[str, Any]:
    """The trace's process and thread tracks, and its slices with their track, flows and attributes."""
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    tracks: dict[int, Any] = {}
    slices = []
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        elif p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            ev = p.track_event
            attrs = {a.name: a.string_value or a.int_value for a in ev.debug_annotations}
            slices.append({"name": ev.name, "track": ev.track_uuid, "seq": p.trusted_packet_sequence_id,
                           "flows": set(ev.flow_ids), "ends": set(ev.terminating_flow_ids), **attrs})
    procs = {d.uuid: d.process.pid for d in tracks.values() if d.HasField("process")}
    threads = {d.uuid: (d.thread.pid, d.thread.tid) for d in tracks.values() if d.HasField("thread")}
    for s in slices:  # the process of each slice: its thread's, or its own track's parent's
        d = tracks[s["track"]]
        s["pid"] = threads[d.uuid][0] if d.uuid in threads else procs[d.parent_uuid]
    return {"procs": procs, "threads": threads, "slices": slices}


def test_a_trace_file_links_the_spans_of_three_processes(tmp_path: Path) -> None:
    out = tmp_path / "run.pftrace"
    _run({"TETRARCH_TRACE_FILE": str(out)}, "3")
    assert out.exists() and not (tmp_path / "run.pftrace.parts").exists()
    trace = _read(out)
    pids = set(trace["procs"].values())
    assert len(pids) >= 3, trace["procs"]
    assert {pid for pid, _ in trace["threads"].values()} <= pids
    slices = trace["slices"]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for s in slices:
        by_name.setdefault(s["name"], []).append(s)
    assert len(by_name["spawn"]) == 2
    sends = [s for s in by_name["send"] if s["endpoint"] == "relay"]
    nested = [s for s in by_name["send"] if s["endpoint"] == "square"]
    assert len(sends) == 3 and len(nested) == 3
    handles = {(s["mesh"], s["trace_id"]): s for s in by_name["handle"]}
    receives = {(s["mesh"], s["trace_id"]): s for s in by_name["receive"]}
    client, middle, leaf = sends[0]["pid"], handles[("middle", sends[0]["trace_id"])]["pid"], \
        handles[("leaf", sends[0]["trace_id"])]["pid"]
    assert len({client, middle, leaf}) == 3
    for send in sends:  # client send -> middle receive -> handle -> nested send -> leaf receive -> handle
        tid = send["trace_id"]
        chain = [send, receives[("middle", tid)], handles[("middle", tid)],
                 next(s for s in nested if s["trace_id"] == tid), receives[("leaf", tid)], handles[("leaf", tid)]]
        assert [s["pid"] for s in chain] == [client, middle, middle, middle, leaf, leaf]
        for parent, child in itertools.pairwise(chain):
            flow = parent["flows"] & child["ends"]
            assert len(flow) == 1, (parent, child)
        assert all(s.get("status", "ok") == "ok" for s in chain)


def test_a_call_through_a_hosts_relay_keeps_its_trace(tmp_path: Path) -> None:
    out = tmp_path / "wide.pftrace"
    res = _run({"TETRARCH_TRACE_FILE": str(out), "TETRARCH_RELAY_MIN": "2"}, "1", "wide")
    assert "RELAYED" in res.stdout
    slices = _read(out)["slices"]
    (send,) = [s for s in slices if s["name"] == "send" and s["mesh"] == "wide"]
    receives = [s for s in slices if s["name"] == "receive" and s["mesh"] == "wide"]
    assert len(receives) == 3 and {s["trace_id"] for s in receives} == {send["trace_id"]}
    assert len({s["pid"] for s in receives}) == 3 and send["actors"] == 3
    assert all(len(send["flows"] & s["ends"]) == 1 for s in receives)


def test_configure_trace_file_from_the_program_and_stale_parts_are_ignored(tmp_path: Path) -> None:
    out = tmp_path / "configured.pftrace"
    stale = tmp_path / "configured.pftrace.parts" / "old-1.spans"  # left by a run that was killed
    stale.parent.mkdir()
    stale.write_bytes(pickle.dumps({"pid": 1, "host": "old", "name": "client", "threads": {},
                                    "spans": [(1, 2, 0, "send", 10, 20, 1, 1, {})]}))
    os.utime(stale, (1_000_000, 1_000_000))
    _run({}, "1", f"--configure={out}")
    pids = {s["pid"] for s in _read(out)["slices"]}
    assert len(pids) == 3 and 1 not in pids and not stale.parent.exists()


def test_sampling_decides_at_the_root_and_nested_calls_follow(tmp_path: Path) -> None:
    out = tmp_path / "half.pftrace"
    _run({"TETRARCH_TRACE_FILE": str(out), "TETRARCH_TRACE_SAMPLE": "0.5"}, "40")
    slices = _read(out)["slices"]
    roots = {s["trace_id"] for s in slices if s["name"] == "send" and s["endpoint"] == "relay"}
    nested = [s for s in slices if s["name"] == "send" and s["endpoint"] == "square"]
    assert 0 < len(roots) < 40  # about half (all or none: a chance of 2 in 2**40)
    # Each traced call's nested call is traced, as a child; one made in an untraced handler was
    # sampled where it was made: a trace of its own, starting there.
    assert roots <= {s["trace_id"] for s in nested}
    linked = {s["trace_id"] for s in nested if s["ends"]}
    assert linked == roots


def test_trace_processor_loads_the_trace_file(tmp_path: Path) -> None:
    shell = os.environ.get("TETRARCH_TRACE_PROCESSOR_BIN") or next(
        iter(glob.glob(os.path.expanduser("~/.local/share/perfetto/**/trace_processor_shell*"), recursive=True)), None)
    if not shell or not os.path.isfile(shell):
        pytest.skip("no trace_processor_shell here (the perfetto package downloads it on first use, and this "
                    "machine has no network): set TETRARCH_TRACE_PROCESSOR_BIN to run this test")
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    out = tmp_path / "run.pftrace"
    _run({"TETRARCH_TRACE_FILE": str(out)}, "2")
    tp = TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=shell))
    try:
        names = [r.name for r in tp.query("select name from slice")]
        flows = list(tp.query("select slice_out, slice_in from flow"))
        procs = {r.pid for r in tp.query("select pid from process where pid > 0")}
    finally:
        tp.close()
    assert {"send", "receive", "handle", "spawn"} <= set(names)
    assert len(flows) >= 2 * 5 and len(procs) >= 3


def test_tetrarch_trace_runs_a_program_and_writes_its_trace(tmp_path: Path) -> None:
    out = tmp_path / "cli.pftrace"
    res = _run({}, cmd=[sys.executable, "-m", "tetrarch", "trace", "-o", str(out), "--", sys.executable, SCENARIO,
                        "1"])
    assert out.exists() and str(out) in res.stderr and "ui.perfetto.dev" in res.stderr
    assert len({s["pid"] for s in _read(out)["slices"]}) >= 3


def test_tetrarch_trace_refuses_a_bad_sample_and_a_missing_command() -> None:
    for argv in (["trace", "--sample", "2", "--", "true"], ["trace"]):
        res = subprocess.run([sys.executable, "-m", "tetrarch", *argv], capture_output=True, text=True,
                             timeout=scaled(60))
        assert res.returncode == 2 and "tetrarch trace:" in res.stderr, res.stderr


def test_spans_reach_an_otlp_receiver_linked_across_processes() -> None:
    with receiving() as receiver:
        _run({"TETRARCH_TRACE_EXPORT": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
              "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_SERVICE_NAME": "trace-test"}, "2")
    spans = {span.span_id: (span, res) for span, res in receiver.spans}
    names = {span.name for span, _ in spans.values()}
    assert {"send", "receive", "handle", "spawn"} <= names
    roles = {res["tetrarch.process"]: res["tetrarch.role"] for _, res in spans.values()}
    assert roles.pop("client") == "client" and len(roles) >= 2 and set(roles.values()) == {"proc"}, roles
    assert {res["process.pid"] for _, res in spans.values()} and len({res["process.pid"]
                                                                      for _, res in spans.values()}) >= 3
    leaf = [s for s, _ in spans.values() if s.name == "handle"
            and any(kv.key == "mesh" and kv.value.string_value == "leaf" for kv in s.attributes)]
    assert len(leaf) == 2
    for handle in leaf:  # up the parents: leaf handle, receive, nested send, middle handle, receive, client send
        chain = [handle]
        while chain[-1].parent_span_id:
            chain.append(spans[chain[-1].parent_span_id][0])
        assert [s.name for s in chain] == ["handle", "receive", "send", "handle", "receive", "send"]
        assert len({s.trace_id for s in chain}) == 1
        assert len({spans[s.span_id][1]["process.pid"] for s in chain}) == 3


def test_spans_finished_while_the_exporter_is_set_up_wait_for_it_within_the_queue_bound() -> None:
    """A client sets its span exporter up on a thread while its host agents launch: what it traces meanwhile
    waits (as many as the SDK's queue holds) and is exported once the exporter exists."""
    code = """
import os, time
from tetrarch._telemetry import SpanRecord, publish_span, subscribe_spans
from tetrarch._telemetry._otlp import _SpanExport
export = _SpanExport()  # what start_span_export(background=True) subscribes before its thread sets it up
subscribe_spans(export)
now = time.time_ns()
for i in range(1, 6):
    publish_span(SpanRecord(7, i, 0, "send", now, now + 1000, os.getpid(), 1, {"mesh": "m"}))
assert len(export.waiting) == 3, export.waiting  # OTEL_BSP_MAX_QUEUE_SIZE
assert export.set_up("client", "client")
assert export.processor.force_flush(5000)  # the queue holds 3: the three that waited leave first
publish_span(SpanRecord(7, 9, 0, "handle", now, now + 1000, os.getpid(), 1, {"mesh": "m"}))
export.processor.shutdown()
print("DONE")
"""
    with receiving() as receiver:
        _run({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_MAX_QUEUE_SIZE": "3",
              "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "3"},
             cmd=[sys.executable, "-c", code])
    assert sorted(int.from_bytes(span.span_id, "big") for span, _ in receiver.spans) == [1, 2, 3, 9]


def test_a_span_collector_that_is_down_never_holds_the_program_up() -> None:
    res = _run({"TETRARCH_TRACE_EXPORT": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{dead_port()}",
                "OTEL_EXPORTER_OTLP_TIMEOUT": "1", "OTEL_BSP_SCHEDULE_DELAY": "100"}, "2")
    warnings = [line for line in res.stderr.splitlines() if "spans could not be exported" in line]
    assert warnings and len(warnings) <= 3, res.stderr  # one per process at most (client, two procs)
    assert "Traceback" not in res.stderr, res.stderr


def test_sampling_zero_traces_nothing_and_headers_do_not_grow(tmp_path: Path) -> None:
    out = tmp_path / "none.pftrace"
    _run({"TETRARCH_TRACE_FILE": str(out), "TETRARCH_TRACE_SAMPLE": "0"}, "2")
    assert not out.exists() and not (tmp_path / "none.pftrace.parts").exists()
    plain = _wire.call_header("actor-1", "square", "tcp://127.0.0.1:1", 7, 0, ("gpus",), (2,), "client", 3)
    assert plain == pickle.dumps((_wire.CALL, "actor-1", "square", "tcp://127.0.0.1:1", 7, 0, ("gpus",), (2,),
                                  "client", 3), 5)
    assert _wire.trace_of(_wire.decode(plain)) is None
    traced = _wire.call_header("actor-1", "square", "tcp://127.0.0.1:1", 7, 0, ("gpus",), (2,), "client", 3,
                               (2**127 + 5, 2**63 + 9))
    assert _wire.trace_of(_wire.decode(traced)) == (2**127 + 5, 2**63 + 9)
    assert len(traced) - len(plain) <= 48


@pytest.mark.parametrize(("env", "said"), [
    ({"TETRARCH_TRACE_SAMPLE": "often"}, "tracing is off: environment variable TETRARCH_TRACE_SAMPLE='often'"),
    ({"TETRARCH_TRACE_SAMPLE": "5"}, "TETRARCH_TRACE_SAMPLE must be between 0 and 1"),
    ({"TETRARCH_TRACE_EXPORT": "zipkin"}, "TETRARCH_TRACE_EXPORT='zipkin' is not known"),
])
def test_bad_trace_settings_are_said_once_and_never_break_the_program(env: dict[str, str], said: str) -> None:
    code = "from tetrarch._telemetry import _caller; _caller.refresh(); _caller.refresh(); print('OK')"
    res = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=scaled(60))
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr
    assert res.stderr.count(said) == 1, res.stderr
