"""``tetrarch.job.spmd``: one served job (2 ranks) run again and again, from this process and others.

The tests run in order on one job: runs on the same procs, a rerun from a second Python
process (``job_load``) and from ``tetrarch run --job``, failed runs followed by working ones,
the server refusing strangers, and last ``kill()`` leaving no process behind.
"""

from __future__ import annotations

import os
import re
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from spmd_helpers import NO_TORCH

from tetrarch.testing import scaled

pytest.importorskip("torch", reason=NO_TORCH)

from tetrarch._spmd import _control
from tetrarch.job.spmd import SPMDJob, SPMDJobError, SPMDRunError, job_load, serve

pytestmark = pytest.mark.timeout(scaled(120))

SCRIPT = str(Path(__file__).parent / "scripts" / "serve_script.py")
T = scaled(60)


@pytest.fixture(scope="module")
def state_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("served") / "state" / "job.json")  # serve() makes the folder


@pytest.fixture(scope="module")
def job(state_path: str) -> Iterator[SPMDJob]:
    served = serve(["torchrun", "--nproc-per-node=2", "--standalone", SCRIPT, "ok", "served"], state_path=state_path)
    try:
        yield served
    finally:
        served.kill()


def _lines(text: str, tag: str) -> dict[int, str]:
    """The ranks' lines of ``tag``, by rank, as the client printed them: ``[ranks gpus=R] TAG rank R ...``."""
    found = re.findall(rf"^\[ranks gpus=(\d)\] ({tag} rank \d of \d sum \d pid \d+)$", text, re.M)
    return {int(gpu): line for gpu, line in found}


def _pids(lines: dict[int, str]) -> set[int]:
    return {int(line.rsplit(" ", 1)[1]) for line in lines.values()}


def test_a_job_is_served_with_a_private_state_file(job: SPMDJob, state_path: str) -> None:
    assert os.stat(state_path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(state_path)).st_mode & 0o777 == 0o700
    sock = os.path.splitext(state_path)[0] + ".sock"
    assert os.stat(sock).st_mode & 0o777 == 0o600
    proc = psutil.Process(job.pid)
    assert proc.ppid() != os.getpid() and os.getsid(job.pid) == job.pid  # detached: a session of its own


def test_two_runs_use_the_same_procs_and_print_each_ranks_lines(job: SPMDJob, capfd: pytest.CaptureFixture) -> None:
    job.run_spmd(timeout=T)
    job.run_spmd([SCRIPT, "ok", "again"], timeout=T)
    out = capfd.readouterr().out
    first, again = _lines(out, "served"), _lines(out, "again")
    assert sorted(first) == sorted(again) == [0, 1], out
    assert first[0].startswith("served rank 0 of 2 sum 1")
    assert _pids(first) == _pids(again) == set(job.status()["proc_pids"])


def _cli(*args: str) -> str:
    """A snippet running ``tetrarch ARGS`` (the CLI's main) in a fresh interpreter."""
    return f"import sys; from tetrarch._cli import main; sys.exit(main({list(args)!r}))"


@pytest.mark.isolated
def test_job_load_in_a_second_python_process_reruns_on_the_same_procs(job: SPMDJob, state_path: str,
                                                                      run_isolated) -> None:
    res = run_isolated(f"from tetrarch.job.spmd import job_load; "
                       f"job_load({state_path!r}).run_spmd([{SCRIPT!r}, 'ok', 'second'])", timeout=60)
    assert res.returncode == 0, res.stderr
    assert _pids(_lines(res.stdout, "second")) == set(job.status()["proc_pids"]), res.stdout
    # and the command line's way to the same job
    res = run_isolated(_cli("run", "--job", state_path, SCRIPT, "ok", "cli"), timeout=60)
    assert res.returncode == 0, res.stderr
    assert sorted(_lines(res.stdout, "cli")) == [0, 1], res.stdout


def test_a_rank_that_raises_fails_the_run_with_its_traceback_and_the_next_run_works(job: SPMDJob) -> None:
    pids = job.status()["proc_pids"]
    with pytest.raises(SPMDRunError) as err:
        job.run_spmd([SCRIPT, "raise", "boom", "1"], timeout=T)
    assert (err.value.rank, err.value.kind, err.value.error_type, err.value.status) == (1, "exception", "ValueError", 1)
    assert "boom: rank 1 fails on purpose" in str(err.value) and "serve_script.py" in err.value.remote_traceback
    job.run_spmd(timeout=T)
    assert job.status()["proc_pids"] == pids  # every rank ended: the procs were kept


def test_sys_exit_3_of_a_rank_is_its_status(job: SPMDJob) -> None:
    with pytest.raises(SPMDRunError, match="rank 0 exited with status 3") as err:
        job.run_spmd([SCRIPT, "exit", "bye", "0", "3"], timeout=T)
    assert (err.value.rank, err.value.status, err.value.kind) == (0, 3, "exit")


def test_ranks_left_running_by_a_failure_are_killed_and_replaced(job: SPMDJob) -> None:
    before = job.status()
    with pytest.raises(SPMDRunError, match="block: rank 0 fails on purpose") as err:
        job.run_spmd([SCRIPT, "block", "block", "0"], timeout=T)
    assert err.value.rank == 0
    old = [psutil.Process(pid) for pid in before["proc_pids"] if psutil.pid_exists(pid)]
    _, alive = psutil.wait_procs(old, timeout=T)
    assert not alive, "the procs of the failed run still run"
    job.run_spmd(timeout=T)  # on fresh procs
    after = job.status()
    assert after["generation"] == before["generation"] + 1
    assert not set(after["proc_pids"]) & set(before["proc_pids"])


def _raw(job: SPMDJob) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(T)
    sock.connect(job._state.socket)
    return sock


def test_strangers_are_refused_and_the_server_keeps_serving(job: SPMDJob, state_path: str) -> None:
    with _raw(job) as sock:  # a wrong token
        _control.send(sock, _control.Hello("0" * 64))
        reply = _control.recv(sock, _control.MAX_FRAME, _control.Reply)
        assert not reply.ok and reply.error == "authentication failed: wrong token for this job"
    with _raw(job) as sock:  # a hello over the size limit: closed before its body is read
        sock.sendall(struct.pack(">I", 1 << 30))
        assert sock.recv(1) == b""
    with _raw(job) as sock:  # garbage
        sock.sendall(struct.pack(">I", 5) + b"\x80abcd")
        assert sock.recv(1) == b""
    with pytest.raises(SPMDJobError, match="already served"):
        serve(["torchrun", "--nproc-per-node=2", SCRIPT, "ok", "x"], state_path=state_path)
    assert job.status()["world_size"] == 2


def test_kill_ends_the_server_procs_and_host_agents_and_removes_the_state(job: SPMDJob, state_path: str) -> None:
    status = job.status()
    procs = [psutil.Process(pid) for pid in [job.pid, *status["proc_pids"], *status["host_pids"]]]
    job.kill()
    _, alive = psutil.wait_procs(procs, timeout=T)
    assert not alive
    assert not os.path.exists(state_path) and not os.path.exists(os.path.splitext(state_path)[0] + ".sock")
    with pytest.raises(FileNotFoundError):
        job_load(state_path)
    job.kill()  # again: a no-op


@pytest.mark.isolated
def test_tetrarch_run_once_with_no_python_exits_with_the_failing_ranks_status(run_isolated) -> None:
    shell = 'echo "rank $RANK of $WORLD_SIZE local $LOCAL_RANK"; [ "$RANK" = 1 ] && exit 3; exit 0'
    res = run_isolated(_cli("run", "--nproc-per-node=2", "--no-python", "sh", "-c", shell), timeout=60)
    assert res.returncode == 3, res.stderr
    assert "[ranks gpus=0] rank 0 of 2 local 0" in res.stdout and "[ranks gpus=1] rank 1 of 2 local 1" in res.stdout
    assert "rank 1 exited with status 3" in res.stderr
