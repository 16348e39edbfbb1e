"""Spans of calls and spawns, linked across processes (``TETRARCH_TRACE_SAMPLE``, ``TRACE_FILE``).

The call path tests :data:`ON` (one module-global read) and does nothing more while it is
false. A call is sampled where it starts (``random() < rate``); a call made while a traced
handler runs is traced whatever the rate, as that handler's child (its parent decided); one made
in an untraced handler is sampled like a root (no "not sampled" mark travels: headers stay as
they are). A traced call's header carries ``(trace id, send span id)`` as its last field
(:func:`tetrarch._runtime.values._wire.call_header`); an untraced header has no such field at
all, so it is not one byte longer.

Spans (published through :func:`tetrarch._telemetry.publish_span`):

* ``send``: the caller, from the call until its outcome is known (the last reply, or a
  failure); for ``broadcast`` and replies to a port, until the messages left.
* ``receive``: the actor's process, from the message's arrival until its handler starts
  (the wait in the actor's mailbox); its parent is ``send``.
* ``handle``: the handler; its parent is ``receive``; calls made inside it are its children.
* ``spawn``: a mesh's spawn, on the caller.

Times are ``time.time_ns()``: processes of one host share its clock, so their spans line up.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from time import time_ns
from typing import Any

from .._config import TRACE_EXPORT, TRACE_FILE, TRACE_SAMPLE
from .._log import get_logger
from . import SpanRecord, publish_span

__all__ = ["CURRENT", "ON", "OpenSpan", "arrived", "end", "exporting", "handler", "open_span", "rate", "refresh",
           "start", "start_export"]

_log = get_logger("trace")

#: Whether this process traces at all: the call path reads this and nothing else while it is false.
ON = False
_rate = [0.0]  # the sampling rate; one list for good: ``_caller.begin`` holds it (and ``_random``)
_export = [""]  # the exporter the settings name ('' or 'otlp'), as refresh() read them
#: ``(trace id, span id)`` of the ``handle`` span running in this context (actor code), else None.
CURRENT: ContextVar[tuple[int, int] | None] = ContextVar("tetrarch_trace", default=None)
_bits = random.getrandbits
_random = random.random

#: A span still open: ``(trace id, span id, parent id, start ns, thread id, name, attributes)``.
OpenSpan = tuple[int, int, int, int, int, str, dict[str, Any]]


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        _log.warning("%s", message)


def rate() -> float:
    """The fraction of root calls traced in this process (0 while tracing is off)."""
    return _rate[0] if ON else 0.0


def refresh() -> bool:
    """Read the trace settings again (at import and when the client's runtime starts); whether tracing is on.
    A trace file's writer starts here; an exporter, with the runtime (:func:`start_export`).

    ``trace_sample`` defaults to 1 when a trace file or an exporter is set. A rate outside 0..1
    is clamped with a warning; an unknown exporter is warned about and ignored; a variable that
    cannot be read turns tracing off with a warning naming it (never raises).
    """
    global ON
    try:
        file, export = TRACE_FILE(), TRACE_EXPORT().strip().lower()
        sample, source = TRACE_SAMPLE.lookup()
    except ValueError as exc:  # a malformed variable: said once here, and no tracing (never an import error)
        _warn_once(f"tracing is off: {exc}")
        ON = False
        return False
    if export not in ("", "otlp"):
        _warn_once(f"TETRARCH_TRACE_EXPORT={export!r} is not known (the one exporter is 'otlp'): spans are not "
                   f"exported")
        export = ""
    if source == "default":
        sample = 1.0 if (file or export) else 0.0
    if not 0.0 <= sample <= 1.0:
        _warn_once(f"TETRARCH_TRACE_SAMPLE must be between 0 and 1 (a fraction of calls), got {sample:g}: "
                   f"using {min(max(sample, 0.0), 1.0):g}")
        sample = min(max(sample, 0.0), 1.0)
    _rate[0] = sample
    ON = sample > 0.0
    if ON and file:
        from ._perfetto import start_writer

        start_writer(file)
    _export[0] = export
    return ON


def exporting() -> bool:
    """Whether this process's spans go to OTLP (``TETRARCH_TRACE_EXPORT=otlp`` and tracing on), as
    :func:`refresh` last read the settings."""
    return ON and _export[0] == "otlp"


def start_export(role: str, name: str, *, background: bool) -> None:
    """Start the span exporter the settings name (``TETRARCH_TRACE_EXPORT=otlp``), if tracing is on, for this
    process (its ``role``, ``client``, ``host`` or ``proc``, and ``name``, as its spans' resource says): when its
    runtime starts, never at import (a host agent forks its zygote first, while it runs one thread; an exporter's
    thread would make that fork unsafe). ``background``: set it up on a thread (a client or a host agent; a
    proc's zygote imported the exporter already). Once per process."""
    if exporting():
        from ._otlp import start_span_export

        start_span_export(role, name, background=background)


def start(name: str, attrs: dict[str, Any]) -> OpenSpan | None:
    """Open a span in this context: a child of the running ``handle`` span, else a new root when
    sampled; None when not traced. Call only while :data:`ON` (the call path decides inline, as
    this does, and builds its attributes only for a traced call)."""
    cur = CURRENT.get()
    if cur is None and _random() >= _rate[0]:
        return None
    return open_span(name, attrs, cur)


def open_span(name: str, attrs: dict[str, Any], cur: tuple[int, int] | None) -> OpenSpan:
    """A span that is traced: a child of ``cur`` (``CURRENT.get()``), else a new trace's root."""
    trace_id, parent = cur if cur is not None else (_bits(128) or 1, 0)
    return (trace_id, _bits(64) or 1, parent, time_ns(), threading.get_native_id(), name, attrs)


def end(span: OpenSpan, status: str | None = None, **more: Any) -> None:
    """Close ``span`` now (any thread) and publish it, with ``status`` and ``more`` attributes."""
    attrs = span[6] if status is None and not more else {**span[6], **more, **({"status": status} if status else {})}
    publish_span(SpanRecord(span[0], span[1], span[2], span[5], span[3], time_ns(), os.getpid(), span[4], attrs))


def arrived(hdr: Any) -> Any:
    """``hdr`` (a call's header) with its arrival time added to its trace field, if it has one."""
    if len(hdr) > 10 and hdr[10] is not None:
        return tuple.__new__(type(hdr), (*hdr[:10], (hdr[10][0], hdr[10][1], time_ns())))
    return hdr


def handler(fn: Callable[..., Any], hdr: Any, is_async: bool, mesh: str) -> Callable[..., Any]:
    """``fn`` (an endpoint's function) recording the ``receive`` and ``handle`` spans of the call
    ``hdr``, or ``fn`` itself when the call is not traced."""
    ctx = hdr[10] if len(hdr) > 10 else None
    if ctx is None:
        return fn
    trace_id, parent = ctx[0], ctx[1]
    arrival = ctx[2] if len(ctx) > 2 else time_ns()
    attrs = {"mesh": mesh, "endpoint": hdr.method, "rank": hdr.rank}

    def finish(start_ns: int, recv: int, span: int, status: str) -> None:
        publish_span(SpanRecord(trace_id, span, recv, "handle", start_ns, time_ns(), os.getpid(),
                                threading.get_native_id(), {**attrs, "status": status}))

    @contextmanager
    def handling() -> Iterator[None]:
        start_ns, (recv, span) = _open(trace_id, parent, arrival, attrs)
        token = CURRENT.set((trace_id, span))
        status = "ok"
        try:
            yield
        except BaseException:
            status = "error"
            raise
        finally:
            CURRENT.reset(token)
            finish(start_ns, recv, span, status)

    if is_async:
        async def traced_async(*args: Any, **kwargs: Any) -> Any:
            with handling():
                return await fn(*args, **kwargs)
        return traced_async

    def traced(*args: Any, **kwargs: Any) -> Any:
        with handling():
            return fn(*args, **kwargs)
    return traced


def _open(trace_id: int, parent: int, arrival: int, attrs: dict[str, Any]) -> tuple[int, tuple[int, int]]:
    """Publish the ``receive`` span (arrival until now); ``(now, (its id, the handle span's id))``."""
    now, recv = time_ns(), _bits(64) or 1
    publish_span(SpanRecord(trace_id, recv, parent, "receive", arrival, now, os.getpid(), threading.get_native_id(),
                            attrs))
    return now, (recv, _bits(64) or 1)


refresh()
