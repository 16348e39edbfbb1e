"""libzmq's and nng's own threads run under SCHED_BATCH (TETRARCH_BATCH_IO_THREADS; docs/performance.md)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tetrarch._plugins import BackendKind, Registry, Status
from tetrarch.plugins import batch_helper_threads, helper_thread_policy
from tetrarch.testing import scaled

SCENARIO = Path(__file__).parent / "scenarios" / "helper_threads.py"
#: Each library's thread names (nng names all of its threads ``nng:...``; libzmq ``ZMQbg/...``).
PREFIX = {"zmq": "ZMQbg/", "nng": "nng:"}


@pytest.fixture
def named_thread() -> Iterator[int]:
    """A live thread of this process named ``tt-helper`` (its OS name, as a C library names its own)."""
    ready, done = threading.Event(), threading.Event()
    tid: list[int] = []

    def run() -> None:
        tid.append(threading.get_native_id())
        with open(f"/proc/self/task/{tid[0]}/comm", "w") as f:
            f.write("tt-helper")
        ready.set()
        done.wait()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(scaled(10))
    yield tid[0]
    done.set()
    thread.join(scaled(10))


def test_only_the_named_threads_change_policy(named_thread: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_BATCH_IO_THREADS", "1")  # the default, whatever this run's environment says
    mine = os.sched_getscheduler(0)
    assert helper_thread_policy() == os.SCHED_BATCH
    assert batch_helper_threads("tt-helper") == 1
    assert os.sched_getscheduler(named_thread) == os.SCHED_BATCH
    assert os.sched_getscheduler(0) == mine  # this thread is no helper
    assert batch_helper_threads("tt-helper") == 0  # done already


def test_the_setting_off_leaves_every_thread_alone(named_thread: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETRARCH_BATCH_IO_THREADS", "0")
    assert helper_thread_policy() is None
    assert batch_helper_threads("tt-helper") == 0
    assert os.sched_getscheduler(named_thread) == os.SCHED_OTHER


@pytest.mark.isolated
@pytest.mark.parametrize("setting", ["1", "0"])
@pytest.mark.parametrize("transport", sorted(PREFIX))
def test_library_threads_of_client_and_proc(transport: str, setting: str, run_scenario) -> None:
    """Every thread the library started, in the client and in a proc, has the policy the setting asks
    for; tetrarch's and the program's own threads keep the default."""
    row = Registry().status(BackendKind.TRANSPORT, transport)
    if row.status is not Status.AVAILABLE:
        pytest.skip(f"transport {transport!r} is {row.status.value}: {row.reason} {row.hint}".strip())
    res = run_scenario(SCENARIO, timeout=60,
                       env={"TETRARCH_TRANSPORT": transport, "TETRARCH_BATCH_IO_THREADS": setting})
    assert res.returncode == 0, res.stderr[-3000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    for side, got in seen.items():
        base, threads = got["base"], got["threads"]  # base: the policy the process started with
        want = os.SCHED_BATCH if setting == "1" else base
        library = {name: p for name, p in threads.items() if name.startswith(PREFIX[transport])}
        assert library, f"no {transport} thread in the {side}: {threads}"
        assert all(p == [want] for p in library.values()), f"{side}: {threads}"
        others = [p for name, p in threads.items() if not name.startswith(PREFIX[transport])]
        assert all(p == [base] for p in others), f"{side}: {threads}"
