"""Fixtures shared by the zmq transport's own tests.

``blocking_recorder(close_when_released=False)`` makes a :class:`BlockingRecorder`: a
listener's handler whose ``block`` message holds the transport's I/O thread (the one that
delivered it) until the test sets ``release``; ``until(check, what)`` polls state that no
callback reports (the listener's sockets, ``/proc``), failing after 10 s (scaled).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tetrarch.plugins import Connection
from tetrarch.testing import scaled
from tetrarch.testing.transport import Recorder


class BlockingRecorder(Recorder):
    """Records like :class:`Recorder`; a ``block`` message sets ``blocking`` and holds the I/O
    thread until ``release`` is set (30 s at most), then, with ``close_when_released``, closes
    its connection from that thread (the listener then sends CLOSE on its shared socket)."""

    def __init__(self, close_when_released: bool = False) -> None:
        super().__init__()
        self.close_when_released = close_when_released
        self.blocking = threading.Event()
        self.release = threading.Event()

    def on_message(self, conn: Connection, frames: list[memoryview]) -> None:
        super().on_message(conn, frames)
        if [bytes(f) for f in frames] == [b"block"]:
            self.blocking.set()
            self.release.wait(scaled(30))
            if self.close_when_released:
                conn.close()


@pytest.fixture
def blocking_recorder() -> Iterator[Callable[..., BlockingRecorder]]:
    """``blocking_recorder(close_when_released=False)``: a fresh :class:`BlockingRecorder`.

    Every one made is released at teardown; a test that closes its transport itself
    releases first (``rec.release.set()``), or the close waits for the held thread.
    """
    made: list[BlockingRecorder] = []

    def make(close_when_released: bool = False) -> BlockingRecorder:
        rec = BlockingRecorder(close_when_released)
        made.append(rec)
        return rec

    yield make
    for rec in made:
        rec.release.set()


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + scaled(10)
    pause = threading.Event()
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        pause.wait(0.005)


@pytest.fixture
def until() -> Callable[[Callable[[], bool], str], None]:
    """``until(check, what)``: poll ``check`` (state nothing reports: nothing to wait on) until it
    holds; fail naming ``what`` after 10 s (scaled)."""
    return _until
