"""Hostile input, fuzzed: what anyone who can reach a proc's address may throw at it.

A real proc of a real proc mesh listens where its actors are reached; any local user
finds that address (``ss -xl``, ``ss -tl``). This test plays such a user on every
available transport: hypothesis throws random bytes, truncated frames, huge announced
lengths, frame counts that disagree with the frames sent, and well-formed pickles
(whose unpickling would create a marker file or end the proc with ``os._exit``) at the
proc without the handshake, while its client keeps calling it. The proc must never
unpickle them, never allocate an announced size before the peer authenticated (its
peak resident memory stays flat), never crash or report a failure to its owner, and
answer every real call during and after the attack.

The proc and its client run in a fresh interpreter per transport
(``scenarios/fuzz_target.py`` with ``TETRARCH_TRANSPORT``), the attack from this
process through ``fuzz_wire.WIRES``. ``make test`` runs ``TETRARCH_FUZZ_EXAMPLES``
(default 100) examples per transport, derandomized and without an example database,
so a run is reproducible; set it higher to fuzz longer. When ``TETRARCH_TRANSPORT`` is
set (the suite runs once per transport), only that transport is fuzzed.

What the kernel does with such input is tested piece by piece in test_auth.py and
test_preauth.py against a router in this process; this test throws generated input at
a whole proc.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_wire import WIRES, Attacker, Wire
from tetrarch._config import FUZZ_EXAMPLES, TRANSPORT
from tetrarch._plugins import get_registry
from tetrarch._runtime.values._wire import SYS
from tetrarch.plugins import BackendKind, Status
from tetrarch.testing import scaled

# It fuzzes every transport itself: run once, not again in the per-transport passes.
pytestmark = [pytest.mark.isolated, pytest.mark.transport_independent, pytest.mark.timeout(scaled(90))]

TARGET = Path(__file__).parent / "scenarios" / "fuzz_target.py"
#: The smallest "huge" announced length; the proc's peak RSS may grow by far less.
HUGE = 256 << 20
RSS_SLACK = 48 << 20
EXIT_CODE = 86  # what an unpickled os._exit bomb would end the proc with


def _transports() -> list[str]:
    """Every transport by name (each test skips those unavailable), or only the one this run is pinned to."""
    pinned = TRANSPORT()
    if pinned:
        return [pinned]
    rows = get_registry().statuses(BackendKind.TRANSPORT)
    return sorted(set(WIRES) | {r.name for r in rows})


class _Marker:
    """Unpickling this creates the file at ``path``: proof that a frame was deserialized."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


class _Exit:
    """Unpickling this ends the process at once with ``EXIT_CODE``."""

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return (os._exit, (EXIT_CODE,))


def _bombs(marker: Path) -> list[bytes]:
    """Well-formed pickles, bare and as a kernel message would carry them."""
    payloads: list[object] = [_Marker(str(marker)), _Exit()]
    out = []
    for payload in payloads:
        for proto in (2, pickle.HIGHEST_PROTOCOL):
            out.append(pickle.dumps(payload, protocol=proto))
            out.append(pickle.dumps((SYS, "probe", payload, None, None), protocol=proto))
    return out


# ------------------------------------------------------------------ the attacks

@dataclass(frozen=True)
class Step:
    """One thing sent: raw wire bytes, or one well-formed message of frames."""

    raw: bytes | None = None
    frames: tuple[bytes, ...] | None = None
    announced: int = 0  # the largest length this step announces


def _send(attacker: Attacker, step: Step) -> None:
    if step.frames is not None:
        attacker.message(step.frames)
    else:
        assert step.raw is not None
        attacker.raw(step.raw)


def _attacks(wire: Wire, bombs: Sequence[bytes]) -> st.SearchStrategy[list[Step]]:
    frame = st.one_of(st.binary(max_size=64), st.sampled_from(bombs))
    frames = st.lists(frame, min_size=1, max_size=5)

    def encoded(fs: list[bytes], count: int | None = None) -> bytes:
        return wire.announce([len(f) for f in fs], len(fs) if count is None else count) + b"".join(fs)

    random_bytes = st.binary(min_size=1, max_size=8192).map(lambda b: Step(raw=b))
    truncated = frames.flatmap(lambda fs: st.integers(1, max(1, len(encoded(fs)) - 1)).map(
        lambda cut: Step(raw=encoded(fs)[:cut])))
    huge = st.tuples(
        st.lists(st.integers(HUGE, 2**63 - 1), min_size=1, max_size=3),
        st.binary(max_size=2048),
    ).map(lambda t: Step(raw=wire.announce(t[0], len(t[0])) + t[1], announced=max(t[0])))
    wrong_count = frames.flatmap(lambda fs: st.integers(0, 2**32 - 1).filter(lambda c: c != len(fs)).map(
        lambda count: Step(raw=encoded(fs, count))))
    pickles = st.lists(st.sampled_from(bombs), min_size=1, max_size=5).map(lambda fs: Step(frames=tuple(fs)))
    pickles_raw = frames.map(lambda fs: Step(raw=encoded(list(bombs[:1]) + fs)))
    any_step = st.one_of(random_bytes, truncated, huge, wrong_count, pickles, pickles_raw)
    return st.lists(any_step, min_size=1, max_size=3)


# ------------------------------------------------------------------ the target

class Target:
    """The client (a fresh interpreter) and its proc under attack."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, f"the fuzz target did not start (exit status {process.wait()})"
        started = json.loads(line)
        self.address: str = started["address"]
        self.transport: str = started["transport"]
        self.proc = psutil.Process(started["pid"])
        self.calls = 0

    def ask(self, command: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def call(self) -> None:
        """One real call through the client; fails the test unless the proc answers it."""
        self.calls += 1
        answer = self.ask(f"call {self.calls}")
        assert answer == f"ok {self.calls}", f"a real call failed during the attack: {answer or 'client gone'}"

    def peak_rss(self) -> int:
        """The proc's peak resident memory so far (VmHWM), in bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc/PID/status")

    def assert_alive(self) -> None:
        if not self.proc.is_running() or self.proc.status() == psutil.STATUS_ZOMBIE:
            pytest.fail(f"the proc died under attack (an unpickled os._exit ends it with {EXIT_CODE})")

    def finish(self) -> int:
        """End the client's input: it stops the proc mesh; returns its exit status."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(timeout=scaled(30))


@pytest.fixture
def target(request: pytest.FixtureRequest, start_scenario: Callable[..., subprocess.Popen[str]]) -> Iterator[Target]:
    name: str = request.param
    row = next((r for r in get_registry().statuses(BackendKind.TRANSPORT) if r.name == name), None)
    if row is None or row.status is not Status.AVAILABLE:
        pytest.skip(f"transport {name!r} is {row.status.value if row else 'not installed'}: "
                    f"{row.reason if row else ''} {row.hint if row else ''}".strip())
    if name not in WIRES:
        pytest.fail(f"transport {name!r} is available but has no attack helper: add one to fuzz_wire.WIRES")
    process = start_scenario(TARGET, env={TRANSPORT.env: name}, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    target = Target(process)
    assert target.transport == name
    yield target
    target.finish()


@pytest.mark.parametrize("target", _transports(), indirect=True)
def test_a_listening_proc_survives_hostile_input_and_keeps_serving(target: Target, tmp_path: Path) -> None:
    wire = WIRES[target.transport]()
    marker = tmp_path / "unpickled"
    target.call()
    baseline = target.peak_rss()
    announced = [0]

    @settings(max_examples=FUZZ_EXAMPLES(), deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(steps=_attacks(wire, _bombs(marker)))
    def attack(steps: list[Step]) -> None:
        attacker = wire.connect(target.address)
        try:
            for step in steps:
                _send(attacker, step)
                announced[0] = max(announced[0], step.announced)
            target.call()  # the attacker's connection is still open: a stalled peer blocks nobody
        finally:
            attacker.close()
        target.assert_alive()
        assert not marker.exists(), f"the proc unpickled a frame sent without the handshake: {steps}"

    attack()
    for _ in range(3):
        target.call()  # after the attack
    target.assert_alive()
    assert not marker.exists()
    assert target.ask("faults") == "faults 0", "the attack reached the client's fault hook"
    grown = target.peak_rss() - baseline
    assert announced[0] >= HUGE, "no huge length was announced: the strategy lost its point"
    assert grown < RSS_SLACK, (
        f"the proc's peak RSS grew by {grown / 2**20:.0f} MiB while unauthenticated peers announced "
        f"up to {announced[0]} bytes"
    )
    print(f"fuzz {target.transport}: {target.calls} real calls answered; peak RSS +{grown / 2**20:.1f} MiB "
          f"while up to {announced[0]} bytes were announced")
    assert target.finish() == 0
