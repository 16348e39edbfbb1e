"""Calls that reach a proc ahead of their actor's spawn wait for it (``_runtime/values/_early.py``).

Regression: an actor handed a freshly spawned mesh called its member on another proc
before the client's spawn message got there, and the call failed with "no actor ..."
(``test_ordering`` on zmq in CI). The end-to-end race is not forced here; these tests pin
the holding rules themselves: arrival order behind ``__init__``, expiry, the limit, and a
failed spawn's reason.
"""

from __future__ import annotations

import threading

import pytest

from tetrarch._runtime.values import _wire
from tetrarch._runtime.values._early import EarlyCalls
from tetrarch.testing import scaled

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(30))]


def _call(key: str, n: int) -> _wire.CallHeader:
    return _wire.CallHeader(_wire.CALL, key, "record", "tcp://127.0.0.1:1", 5, n, ("gpus",), (4,))


class _Box:
    def __init__(self) -> None:
        self.got: list[int] = []

    def deliver(self, hdr: _wire.CallHeader, payload: list) -> None:
        self.got.append(hdr.rank)


class _Rejects:
    def __init__(self, expect: int) -> None:
        self.seen: list[tuple[int, str]] = []
        self._expect = expect
        self.done = threading.Event()

    def __call__(self, hdr: _wire.CallHeader, why: str) -> None:
        self.seen.append((hdr.rank, why))
        if len(self.seen) >= self._expect:
            self.done.set()


def test_calls_ahead_of_the_spawn_are_delivered_first_in_arrival_order() -> None:
    mailboxes: dict = {}
    early = EarlyCalls(mailboxes, _Rejects(1), "procs[1]")
    for n in range(3):
        assert early.hold(_call("a-1-2-x", n), [])
    box = _Box()
    early.publish("a-1-2-x", box)
    assert box.got == [0, 1, 2] and mailboxes["a-1-2-x"] is box
    assert early.hold(_call("a-1-2-x", 3), [])  # raced with the publication: delivered, not held
    assert box.got == [0, 1, 2, 3]
    early.close()


def test_a_call_whose_spawn_never_arrives_is_refused_after_the_hold() -> None:
    rejects = _Rejects(2)
    early = EarlyCalls({}, rejects, "procs[1]", hold_s=0.2)
    early.hold(_call("ghost-1-2-x", 0), [])
    early.hold(_call("ghost-1-2-x", 1), [])
    assert rejects.done.wait(scaled(10))
    assert [n for n, _ in rejects.seen] == [0, 1]
    assert "no actor 'ghost-1-2-x' in proc procs[1]: no spawn of it arrived within 0.2 s" in rejects.seen[0][1]


def test_held_calls_are_bounded_and_a_refusal_says_so() -> None:
    early = EarlyCalls({}, _Rejects(1), "procs[1]", limit=2)
    assert early.hold(_call("a-1-2-x", 0), []) and early.hold(_call("b-1-3-x", 0), [])
    assert not early.hold(_call("c-1-4-x", 0), [])
    assert "2 calls already wait" in early.refusal("c-1-4-x")
    early.close()


def test_a_failed_spawn_refuses_its_waiting_calls_with_its_reason() -> None:
    rejects = _Rejects(1)
    early = EarlyCalls({}, rejects, "procs[1]")
    early.hold(_call("a-1-2-x", 0), [])
    early.refuse("a-1-2-x", "spawning a failed: ImportError: no module named m")
    assert rejects.seen == [(0, "spawning a failed: ImportError: no module named m")]
    early.close()
