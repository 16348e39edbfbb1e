"""The trace file (``TETRARCH_TRACE_FILE``, ``tetrarch trace``): every process's spans in one Perfetto trace.

Each process keeps its spans in a bounded buffer (:data:`MAX_SPANS`; the rest are counted
and said once) and, when it exits, writes them as one part, ``<file>.parts/<host>-<pid>.spans``
(pickled records). The client, once its procs have stopped (:func:`finish_trace_file`, on its
way out), reads every part and writes the trace: Perfetto's protobuf format, written with the
``perfetto`` package's protos. Built in one place, the trace can link each span to its parent
exactly, across processes, with a flow arrow (``send`` → ``receive`` → ``handle`` → nested ``send``).

Tracks: one per process (named by its proc id, or ``client``) and one per thread under it. A
span that overlaps its thread's others without nesting in them (pipelined ``send`` spans, the
``receive`` spans of queued calls) gets its own track under its process, named as the span.

A process killed before its exit writes no part: its spans are missing from the file. Parts older
than the client's start (left by an earlier run that was killed) are ignored and removed.
"""

from __future__ import annotations

import atexit
import glob
import os
import pickle
import shutil
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

from .._config_launch import ENV_PROC_ID
from .._log import get_logger
from . import SpanRecord, subscribe_spans, unsubscribe_spans

__all__ = ["MAX_SPANS", "build_trace", "finish_trace_file", "start_writer", "write_part"]

_log = get_logger("trace")
#: The spans a process keeps for the trace file; later ones are dropped and counted.
MAX_SPANS = 200_000
_spans: list[SpanRecord] = []
_threads: dict[int, str] = {}
_dropped = [0]
_target: list[str] = []  # the trace file, once the writer started
_since: list[float] = []  # when (time.time()) this process started it, less a second: older parts are stale


def _keep(rec: SpanRecord) -> None:
    if len(_spans) < MAX_SPANS:
        _spans.append(rec)
        tid = rec.tid
        if tid not in _threads and tid == threading.get_native_id():
            _threads[tid] = threading.current_thread().name
    else:
        _dropped[0] += 1


def start_writer(file: str) -> None:
    """Keep this process's spans for ``file`` and write them as a part at exit (once per process)."""
    if _target:
        return
    _target.append(os.path.abspath(file))
    _since.append(time.time() - 1.0)
    subscribe_spans(_keep)
    atexit.register(write_part)


def _parts_dir(file: str) -> str:
    return file + ".parts"


def write_part() -> str | None:
    """Write this process's spans as its part of the trace file; its path (None: nothing to write).

    Writes once; a failure to write is warned about, never raised.
    """
    if not _target:
        return None
    unsubscribe_spans(_keep)
    spans, _spans[:] = list(_spans), []
    if not spans:
        return None
    if _dropped[0]:
        _log.warning("trace file: %d spans of this process were dropped (more than %d)", _dropped[0], MAX_SPANS)
    for t in threading.enumerate():
        if t.native_id is not None:
            _threads.setdefault(t.native_id, t.name)
    part = {"pid": os.getpid(), "host": socket.gethostname(), "name": os.environ.get(ENV_PROC_ID.name) or "client",
            "threads": dict(_threads), "spans": [tuple(s) for s in spans]}
    folder = _parts_dir(_target[0])
    path = os.path.join(folder, f"{part['host']}-{part['pid']}.spans")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(path + ".tmp", "wb") as f:
            pickle.dump(part, f, protocol=5)
        os.replace(path + ".tmp", path)
    except OSError as exc:
        _log.warning("trace file: this process's spans could not be written to %s: %s", path, exc)
        return None
    return path


def finish_trace_file() -> str | None:
    """The client's last step (after its procs stopped): write the trace file from every part; its path.

    Returns None when this process writes no trace file. A missing ``perfetto`` package gives one
    warning naming ``pip install "tetrarch[trace]"`` (the parts are left for a later try).
    """
    if not _target:
        return None
    file = _target[0]
    write_part()
    folder = _parts_dir(file)
    parts = []
    for path in sorted(glob.glob(os.path.join(folder, "*.spans"))):
        try:
            if os.path.getmtime(path) < _since[0]:
                continue  # left by an earlier run that did not finish its file
            with open(path, "rb") as f:
                parts.append(pickle.load(f))
        except (OSError, pickle.UnpicklingError, EOFError) as exc:
            _log.warning("trace file: part %s could not be read (%s): skipped", path, exc)
    try:
        data = build_trace(parts)
    except ImportError:
        _log.warning("TETRARCH_TRACE_FILE is set but the perfetto package is missing: pip install "
                     "\"tetrarch[trace]\" (the spans are left in %s)", folder)
        return None
    try:
        with open(file, "wb") as f:
            f.write(data)
    except OSError as exc:
        _log.warning("trace file %s could not be written: %s", file, exc)
        return None
    shutil.rmtree(folder, ignore_errors=True)
    _target.clear()
    return file


def _nests(spans: list[tuple], out: set[int]) -> None:
    """Add to ``out`` the span ids of ``spans`` (one thread's) that nest on the thread's track."""
    stack: list[int] = []  # end times of the open slices
    for s in sorted(spans, key=lambda s: (s[4], -s[5])):
        while stack and stack[-1] <= s[4]:
            stack.pop()
        if not stack or s[5] <= stack[-1]:
            stack.append(s[5])
            out.add(s[1])


def build_trace(parts: Iterable[dict[str, Any]]) -> bytes:
    """A serialized Perfetto ``Trace`` of ``parts`` (what :func:`write_part` wrote).

    Raises:
        ImportError: the ``perfetto`` package is missing.
    """
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb  # type: ignore[import-untyped]

    parts = list(parts)
    trace = pb.Trace()
    children: dict[int, list[int]] = {}  # span id -> the span ids of its children (for flows)
    known = {s[1] for part in parts for s in part["spans"]}
    for part in parts:
        for s in part["spans"]:
            if s[2] in known:
                children.setdefault(s[2], []).append(s[1])
    uuid = iter(range(1, 1 << 62))
    for seq, part in enumerate(parts, start=1):
        pid = part["pid"]
        proc_uuid = next(uuid)
        first = trace.packet.add()
        first.trusted_packet_sequence_id = seq
        first.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        first.track_descriptor.uuid = proc_uuid
        first.track_descriptor.process.pid = pid
        first.track_descriptor.process.process_name = f"{part['name']} ({part['host']} pid {pid})"
        by_tid: dict[int, list[tuple]] = {}
        for s in part["spans"]:
            by_tid.setdefault(s[7], []).append(s)
        events: list[tuple[tuple[int, int, int], int, tuple]] = []  # (order, track, span): ordered as they nest
        for tid, spans in by_tid.items():
            thread_uuid = next(uuid)
            p = trace.packet.add()
            p.trusted_packet_sequence_id = seq
            p.track_descriptor.uuid = thread_uuid
            p.track_descriptor.parent_uuid = proc_uuid
            p.track_descriptor.thread.pid = pid
            p.track_descriptor.thread.tid = tid
            p.track_descriptor.thread.thread_name = part["threads"].get(tid, f"thread {tid}")
            nested: set[int] = set()
            _nests(spans, nested)
            for s in spans:
                track = thread_uuid
                if s[1] not in nested:
                    track = next(uuid)
                    d = trace.packet.add()
                    d.trusted_packet_sequence_id = seq
                    d.track_descriptor.uuid = track
                    d.track_descriptor.parent_uuid = proc_uuid
                    d.track_descriptor.name = s[3]
                end = max(s[5], s[4])
                # At one instant: ends before begins, the inner slice's end first, the outer slice's begin first.
                events.append(((s[4], 1, -end), track, s))
                events.append(((end, 0, -s[4]), track, s))
        for order, track, s in sorted(events, key=lambda e: e[0]):
            if order[1]:
                _begin(trace, pb, seq, track, s, children.get(s[1], ()) if s[1] else (), s[2] in known)
            else:
                _end(trace, pb, seq, track, order[0])
    return bytes(trace.SerializeToString())


def _begin(trace: Any, pb: Any, seq: int, track: int, s: tuple, kids: Iterable[int], linked: bool) -> None:
    begin = trace.packet.add()
    begin.trusted_packet_sequence_id = seq
    begin.timestamp = s[4]
    ev = begin.track_event
    ev.type = pb.TrackEvent.TYPE_SLICE_BEGIN
    ev.track_uuid = track
    ev.name = s[3]
    ev.flow_ids.extend(kids)  # one flow per child: it starts here ...
    if linked:
        ev.terminating_flow_ids.append(s[1])  # ... and ends at the child
    for key, value in sorted({**s[8], "trace_id": f"{s[0]:032x}", "span_id": f"{s[1]:016x}"}.items()):
        ann = ev.debug_annotations.add()
        ann.name = key
        if isinstance(value, bool):
            ann.bool_value = value
        elif isinstance(value, int):
            ann.int_value = value
        else:
            ann.string_value = str(value)


def _end(trace: Any, pb: Any, seq: int, track: int, ts: int) -> None:
    end = trace.packet.add()
    end.trusted_packet_sequence_id = seq
    end.timestamp = ts
    end.track_event.type = pb.TrackEvent.TYPE_SLICE_END
    end.track_event.track_uuid = track
