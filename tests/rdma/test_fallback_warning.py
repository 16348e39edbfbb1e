"""The ``tcp`` fallback's warning: said once, in a line, where tcp carries a transfer; never for ``shm``.

On one host the automatic choice is ``shm``, the best path there is: a program that moves
bytes between its procs prints no warning in any process (it printed a 600-character
``RDMATcpFallbackWarning ... falls back to 'shm'`` in every proc). A transfer over ``tcp``
warns once per process, at the user's line, saying how to silence it; ``tcp`` chosen on
purpose (``TETRARCH_RDMA_BACKEND=tcp``) is no fallback and is not warned about.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tetrarch.plugins import BackendKind, Status, get_registry
from tetrarch.rdma import RDMATcpFallbackWarning
from tetrarch.testing import scaled
from tetrarch.testing._rdma_actors import Holder, pattern

pytestmark = pytest.mark.timeout(scaled(90))

SCENARIOS = Path(__file__).parent / "scenarios"


def _need_shm() -> None:
    row = next(r for r in get_registry().statuses(BackendKind.RDMA) if r.name == "shm")
    if row.status is not Status.AVAILABLE:
        pytest.skip(f"the shm RDMA backend is {row.status.value} here: {row.reason}")


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[warnings.WarningMessage]]:
    """This process's once-per-process flags reset (the registry's too, which warned before), and
    every warning recorded."""
    from tetrarch._plugins import _fallback
    from tetrarch._rdma import _fallback_warning

    monkeypatch.setattr(_fallback, "_fallback_warned", False)
    monkeypatch.setattr(_fallback_warning, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


@pytest.fixture(scope="module")
def owner(procs: Any) -> Iterator[Any]:
    holder = procs.slice(gpus=0).spawn("fallback_owner", Holder)
    yield holder
    holder.stop().get(timeout=scaled(30))


def _read(buf: Any) -> bytearray:
    dst = bytearray(buf.size())
    buf.read_into(dst, timeout=scaled(30)).get(timeout=scaled(30))  # the line the warning names
    return dst


def _fallback_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, RDMATcpFallbackWarning)]


def test_a_same_host_transfer_over_shm_warns_of_nothing(owner: Any, fresh_warnings: list) -> None:
    _need_shm()
    from tetrarch.rdma import RDMABuffer, get_rdma_backend

    buf = owner.make.call_one("auto", 4096, 1, None).get(timeout=scaled(30))
    assert buf.backend == "shm"
    assert _read(buf) == pattern(4096, 1)
    mine = bytearray(10)
    RDMABuffer(mine).drop().get(timeout=scaled(10))  # registering here (automatic choice)
    assert get_rdma_backend() == "shm"
    assert _fallback_warnings(fresh_warnings) == [], [str(w.message) for w in fresh_warnings]


def test_a_transfer_over_tcp_warns_once_at_the_users_line_saying_how_to_silence_it(
        owner: Any, fresh_warnings: list) -> None:
    buf = owner.make.call_one("tcp", 4096, 2, "tcp").get(timeout=scaled(30))
    for _ in range(3):
        assert _read(buf) == pattern(4096, 2)
    found = _fallback_warnings(fresh_warnings)
    assert len(found) == 1, [str(w.message) for w in found]
    text = str(found[0].message)
    assert len(text) < 300, text
    assert "'tcp' fallback" in text and "registered it with 'tcp' only" in text, text
    assert "warnings.filterwarnings('ignore', category=tetrarch.rdma.RDMATcpFallbackWarning)" in text, text
    assert found[0].filename == __file__, (found[0].filename, found[0].lineno)


def test_tcp_chosen_on_purpose_is_not_warned_about(owner: Any, fresh_warnings: list,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    buf = owner.make.call_one("tcp-chosen", 4096, 4, "tcp").get(timeout=scaled(30))
    monkeypatch.setenv("TETRARCH_RDMA_BACKEND", "tcp")
    assert _read(buf) == pattern(4096, 4)
    assert _fallback_warnings(fresh_warnings) == [], [str(w.message) for w in fresh_warnings]


@pytest.mark.isolated  # every proc's stderr: a fresh client and its procs
def test_a_single_host_program_prints_no_rdma_warning_in_any_process(run_scenario: Any) -> None:
    _need_shm()
    res = run_scenario(SCENARIOS / "single_host_rdma.py", timeout=scaled(80))
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "backend=shm ok", res.stdout
    assert "Warning" not in res.stderr, res.stderr[-3000:]
