"""Procs' stdout and stderr reach the client line by line, prefixed with mesh and rank (issue 10, point 5).

Each test runs ``scenarios/proc_output.py`` as a fresh client and reads what it printed:
a proc's stdout lines must be on the client's stdout, its stderr lines on stderr, each
prefixed ``[trainers gpus=<r>] ``, in the order the proc wrote them, and all of them
before ``procs.stop().get()`` returned (the client prints ``CLIENT DONE`` right after).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from output_actors import LINES, LONG
from tetrarch._runtime.plumbing._spawn import MAX_LINE, LineSplitter
from tetrarch.testing import scaled

pytestmark = [pytest.mark.timeout(scaled(90))]

HERE = Path(__file__).resolve().parent
SCENARIO = HERE / "scenarios" / "proc_output.py"

Run = Callable[..., subprocess.CompletedProcess[str]]


def _run(run_scenario: Run, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    res = run_scenario(SCENARIO, *args, timeout=60, pythonpath=[HERE], env=env)
    assert res.returncode == 0, (f"exit {res.returncode}\n--- stdout ---\n{res.stdout[-3000:]}\n"
                                 f"--- stderr ---\n{res.stderr[-3000:]}")
    return res


def _of(text: str, rank: int) -> list[str]:
    """The lines of ``text`` from rank ``rank``, prefix removed."""
    prefix = f"[trainers gpus={rank}] "
    return [ln[len(prefix):] for ln in text.splitlines() if ln.startswith(prefix)]


@pytest.mark.isolated
def test_prints_logs_and_warnings_arrive_prefixed_in_order_on_their_stream_before_stop_returns(run_scenario):
    res = _run(run_scenario, "talk")
    out, err = res.stdout, res.stderr
    assert out.rstrip().endswith("CLIENT DONE"), "every line must be printed before stop() returns"
    for r in range(3):
        mine = _of(out, r)
        # stdout: the numbered lines in order, then the long line (in pieces), the C-level
        # write, and the last line the proc wrote without a newline (flushed when it exited).
        assert mine[:LINES] == [f"out {r} {i}" for i in range(LINES)], mine[:LINES + 1]
        pieces = LONG // MAX_LINE + 1
        long_line = "".join(mine[LINES:LINES + pieces])
        assert long_line == f"long {r} " + "x" * LONG
        assert mine[LINES + pieces:] == [f"c-level {r}", f"tail {r} without newline"]
        # stderr: print(file=sys.stderr), logging, warnings; nothing of it on stdout and vice versa
        theirs = _of(err, r)
        assert theirs[:2] == [f"err {r}", f"log {r}"], theirs
        assert any(f"UserWarning: careful {r}" in ln for ln in theirs[2:]), theirs
        assert not any(ln.startswith("out ") for ln in theirs)
        assert f"err {r}" not in mine and f"log {r}" not in mine
    assert not re.search(r"^(out|err|log) \d", out + err, re.M), "an unprefixed proc line slipped through"


@pytest.mark.isolated
def test_heavy_output_arrives_whole_and_in_order_in_many_batches(run_scenario):
    n = 40_000  # about 1 MiB per proc: many batches, the senders wait for credit
    res = _run(run_scenario, "flood", str(n))
    assert res.stdout.rstrip().endswith("CLIENT DONE")
    for r in range(2):
        assert _of(res.stdout, r) == [f"flood {r} {i}" for i in range(n)]


@pytest.mark.isolated
def test_a_crashing_proc_s_traceback_arrives_prefixed(run_scenario):
    res = _run(run_scenario, "crash")
    assert "[trainers gpus=1] about to crash" in res.stdout
    err = _of(res.stderr, 1)
    assert "Fatal Python error: Segmentation fault" in err, res.stderr[-3000:]
    assert any('output_actors.py", line' in ln and "in crash" in ln for ln in err), res.stderr[-3000:]
    assert "CALL FAILED SupervisionError" in res.stdout


@pytest.mark.isolated
def test_logging_option_switches_forwarding_off_and_on(run_scenario):
    res = _run(run_scenario, "toggle")
    lines = res.stdout.splitlines()
    assert "[trainers gpus=0] forwarded 1" in lines and "[trainers gpus=0] forwarded 2" in lines
    # through the host agent's own stdout: not lost, not prefixed
    assert "unprefixed" in lines, f"{res.stdout}\n--- stderr ---\n{res.stderr[-3000:]}"


@pytest.mark.isolated
def test_the_forward_output_setting_off_gives_unprefixed_output(run_scenario):
    # Unforwarded, the procs write to the client's own stdout and stderr pipes: writes of
    # several processes over PIPE_BUF may interleave there (as with any multi-process
    # program), so this mode writes one short line per stream and rank.
    res = _run(run_scenario, "plain", TETRARCH_FORWARD_OUTPUT="0")
    assert "[trainers" not in res.stdout + res.stderr
    for r in range(3):
        assert f"out {r}" in res.stdout.splitlines(), res.stdout
        assert f"err {r}" in res.stderr.splitlines(), res.stderr


@pytest.mark.isolated
def test_aggregation_folds_identical_lines_of_many_ranks_into_one_with_a_count(run_scenario):
    res = _run(run_scenario, "aggregate")
    lines = res.stdout.splitlines()
    assert lines.count("[trainers 4 similar log lines] loss 0.31") == 1, res.stdout
    assert "loss 0.31" not in "".join(ln for ln in lines if not ln.startswith("[trainers 4 similar"))
    for r in range(4):  # a line one rank wrote keeps its rank's prefix
        assert f"[trainers gpus={r}] only rank {r}" in lines
    # level=logging.INFO: the procs' info records show (folded, on stderr, naming their actor), debug
    # ones do not
    assert "[trainers 4 similar log lines] [actor=talker] INFO:app:info shown" in res.stderr.splitlines(), \
        res.stderr
    assert "debug hidden" not in res.stdout + res.stderr


@pytest.mark.isolated
def test_procs_and_host_agents_show_their_mesh_and_rank_in_ps(run_scenario):
    res = _run(run_scenario, "titles")
    titles = [ln.split(" ", 1)[1].strip() for ln in res.stdout.splitlines() if ln.startswith("TITLE ")]
    assert titles == ["tetrarch proc trainers gpus=1", "tetrarch host-agent 0"], res.stdout


@pytest.mark.transport_independent  # pure: no process
def test_lines_are_split_with_bounded_length_and_the_unterminated_rest_kept():
    s = LineSplitter(limit=8)
    assert s.feed(b"ab\ncd") == [b"ab\n"]
    assert s.feed(b"ef\n0123456789abcdefXY") == [b"cdef\n", b"01234567", b"89abcdef"]
    assert s.end() == [b"XY"]
    assert s.end() == []
    assert LineSplitter(limit=4).feed(b"0123456789\n") == [b"0123", b"4567", b"89\n"]


@pytest.mark.transport_independent  # pure: no process
def test_logging_option_refuses_bad_arguments_naming_the_fix():
    from tetrarch import this_proc

    with pytest.raises(TypeError, match="stream_to_client: bool"):
        this_proc().logging_option(stream_to_client="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seconds >= 0"):
        this_proc().logging_option(aggregate_window_sec=-1)
