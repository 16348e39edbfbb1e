"""A proc's Python stdout/stderr over a pipe nobody reads: writes return at once, output is
kept in order up to a bound, and what is dropped beyond it is counted in the stream."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading

import pytest

from tetrarch._runtime.plumbing._stdio import NonBlockingPipe
from tetrarch.testing import scaled

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(60))]


def _read_until(fd: int, needle: bytes, limit: float) -> bytes:
    """Read ``fd`` until ``needle`` appeared (or fail after ``limit`` s)."""
    out = bytearray()
    done = threading.Event()

    def reader() -> None:
        while needle not in out:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            out.extend(chunk)
        done.set()

    threading.Thread(target=reader, daemon=True).start()
    assert done.wait(limit), f"{needle!r} never came ({len(out)} bytes read)"
    return bytes(out)


def test_writes_to_a_full_pipe_return_at_once_and_keep_order_up_to_the_bound() -> None:
    r, w = os.pipe()
    try:
        raw = NonBlockingPipe(w, "stdout", limit=256 * 1024, stall_s=0.05)
        lines = [f"{i:07d}".encode() + b"." * 1016 + b"\n" for i in range(1024)]  # 1 MiB, 1 KiB lines
        for line in lines:  # a pipe holds 64 KiB: this used to block after 64 lines
            assert raw.write(line) == len(line)
        assert raw.dropped_total > 0
        out = _read_until(r, b"were dropped", scaled(10))
        kept, note = out.split(b"\n[tetrarch] ", 1)
        got = kept.split(b"\n")[:-1] if kept.endswith(b"\n") else kept.split(b"\n")
        assert [g + b"\n" for g in got] == lines[: len(got)], "what is kept is the first output, in order"
        assert 64 + 256 <= len(got) < 1024
        dropped = int(re.match(rb"(\d+) bytes of stdout were dropped", note).group(1))  # type: ignore[union-attr]
        assert dropped == raw.dropped_total == 1024 * 1024 - len(kept)
        # After the note the stream goes on as before.
        raw.write(b"after\n")
        assert _read_until(r, b"after\n", scaled(10)).endswith(b"after\n")
    finally:
        os.close(r)
        os.close(w)


def test_a_proc_like_process_prints_past_a_stalled_reader_and_exits() -> None:
    """The installed streams in a real process whose stdout pipe nobody reads: it finishes."""
    code = textwrap.dedent("""
        import sys
        from tetrarch._runtime.plumbing import _stdio
        _stdio.install()
        for i in range(2000):
            print("x" * 1023)
        print("done", file=sys.stderr)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        err = proc.stderr.read()  # type: ignore[union-attr]
        assert proc.wait(timeout=scaled(20)) == 0, err  # held output waits at most EXIT_FLUSH_S at exit
        assert b"done" in err
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
