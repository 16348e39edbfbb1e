"""torchrun command lines as ``tetrarch.job.spmd.serve`` reads them, and the bad input refused before anything starts.

Pure: no procs, no job server, no torch import.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest

from tetrarch._spmd._torchrun import TorchrunCommand, check_program, parse_torchrun
from tetrarch.job.spmd import SPMDJobError, job_load, serve

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(30)]

SCRIPT = str(Path(__file__).parent / "scripts" / "serve_script.py")


@pytest.mark.parametrize("command", [
    ["torchrun", "--nproc-per-node=4", "--standalone", "train.py", "--lr", "0.1"],
    ["torchrun", "--nproc_per_node", "4", "--nnodes=1:1", "train.py", "--lr", "0.1"],
    ["python", "-m", "torch.distributed.run", "--nproc-per-node", "4", "train.py", "--lr", "0.1"],
    ["/usr/bin/python3.12", "-m", "torchrun", "--nproc-per-node=4", "--", "train.py", "--lr", "0.1"],
    [sys.executable, "-m", "torch.distributed.run", "--run-path", "--nproc-per-node=4", "train.py", "--lr", "0.1"],
    ["/opt/venv/bin/torchrun", "--nnodes", "1", "--nproc-per-node=4", "train.py", "--lr", "0.1"],
])
def test_the_forms_of_a_torchrun_command_line(command: list[str]) -> None:
    cmd = parse_torchrun(command)
    assert (cmd.nnodes, cmd.nproc_per_node, cmd.world_size) == (1, 4, 4)
    assert cmd.program == ("train.py", "--lr", "0.1") and not cmd.no_python


def test_module_and_no_python_programs() -> None:
    assert parse_torchrun(["torchrun", "-m", "pkg.train", "--x", "1"]).program == ("-m", "pkg.train", "--x", "1")
    assert parse_torchrun(["torchrun", "--module", "pkg.train"]).program == ("-m", "pkg.train")
    cmd = parse_torchrun(["torchrun", "--no_python", "--nnodes=2", "--nproc-per-node=3", "./bench", "-v"])
    assert cmd == TorchrunCommand(nnodes=2, nproc_per_node=3, program=("./bench", "-v"), no_python=True)


def test_flags_after_the_script_are_the_scripts_own() -> None:
    cmd = parse_torchrun(["torchrun", "train.py", "--max-restarts", "3", "-m", "x"])
    assert cmd.program == ("train.py", "--max-restarts", "3", "-m", "x")


def test_rendezvous_flags_are_accepted_and_ignored() -> None:
    cmd = parse_torchrun(["torchrun", "--rdzv-endpoint=localhost:29400", "--rdzv_backend", "c10d", "--rdzv-id=7",
                          "--master-addr=10.0.0.1", "--master_port", "29500", "--node-rank=0", "train.py"])
    assert cmd.ignored == ("--rdzv-endpoint", "--rdzv-backend", "--rdzv-id", "--master-addr", "--master-port",
                           "--node-rank")


def test_cpu_means_this_machines_cpus() -> None:
    assert parse_torchrun(["torchrun", "--nproc-per-node=cpu", "t.py"]).nproc_per_node == (os.cpu_count() or 1)


@pytest.mark.parametrize(("flag", "why"), [
    (["--max-restarts=3"], "call run_spmd() again"),
    (["--max_restarts", "3"], "call run_spmd() again"),
    (["--redirects", "3"], "prefixed with its rank"),
    (["-r", "3"], "prefixed with its rank"),
    (["--tee=3"], "prefixed with its rank"),
    (["--log-dir", "/tmp/x"], "prefixed with its rank"),
    (["--start-method=spawn"], "not in multiprocessing"),
    (["--role", "trainer"], "ROLE_NAME"),
    (["--rdzv-conf", "timeout=5"], "its own rendezvous"),
])
def test_an_unsupported_flag_is_refused_by_name_with_the_reason(flag: list[str], why: str) -> None:
    name = flag[0].partition("=")[0].lstrip("-").replace("_", "-")
    name = {"r": "redirects"}.get(name, name)
    with pytest.raises(ValueError, match=f"torchrun flag --{name} is not supported by tetrarch.job.spmd.serve") as err:
        parse_torchrun(["torchrun", *flag, "train.py"])
    assert why in str(err.value)


def test_an_unknown_flag_is_refused_naming_those_understood() -> None:
    with pytest.raises(ValueError, match=r"torchrun flag --bogus is not supported .* --nproc-per-node"):
        parse_torchrun(["torchrun", "--bogus=1", "train.py"])


@pytest.mark.parametrize(("command", "needle"), [
    ([], "the command is empty"),
    ("torchrun train.py", "as a list of strings"),
    (["python", "train.py"], "is no torchrun command"),
    (["bash", "-c", "torchrun"], "is no torchrun command"),
    (["torchrun", "--standalone"], "names no program"),
    (["torchrun", "--nproc-per-node"], "needs a value"),
    (["torchrun", "--nproc-per-node=0", "t.py"], "at least 1"),
    (["torchrun", "--nnodes=0", "t.py"], "at least 1"),
    (["torchrun", "--nproc-per-node=four", "t.py"], "is no integer"),
    (["torchrun", "--nnodes=1:4", "t.py"], "elastic --nnodes=1:4 is not supported"),
    (["torchrun", "--standalone", "--nnodes=2", "t.py"], "--standalone means one node"),
    (["torchrun", "-m", "--no-python", "t"], "exclude each other"),
    (["torchrun", "--standalone=yes", "t.py"], "takes no value"),
])
def test_bad_command_lines_name_the_fix(command: list[str], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_torchrun(command)


def test_the_program_is_checked_where_the_caller_is(tmp_path: Path) -> None:
    check_program(parse_torchrun(["torchrun", SCRIPT]))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_program(parse_torchrun(["torchrun", str(tmp_path / "nope.py")]))
    with pytest.raises(ModuleNotFoundError, match="no_such_module_for_serve"):
        check_program(parse_torchrun(["torchrun", "-m", "no_such_module_for_serve"]))
    with pytest.raises(FileNotFoundError, match="--no-python: executable 'no-such-exe-for-serve' not found on PATH"):
        check_program(parse_torchrun(["torchrun", "--no-python", "no-such-exe-for-serve"]))
    check_program(parse_torchrun(["torchrun", "--no-python", "sh", "-c", "true"]))


@pytest.mark.parametrize(("kwargs", "error", "needle"), [
    ({"command": ["torchrun", "/no/such/train.py"]}, FileNotFoundError, "does not exist"),
    ({"command": ["torchrun", "--max-restarts=1", SCRIPT]}, ValueError, "--max-restarts is not supported"),
    ({"command": ["torchrun", SCRIPT], "scheduler": "kubernetes"}, ValueError, r"choose one of \['local', 'slurm'\]"),
    ({"command": ["torchrun", SCRIPT], "scheduler_cfg": {"partition": "x"}}, ValueError, "takes no scheduler_cfg"),
    ({"command": ["torchrun", SCRIPT], "env": {"A": 1}}, ValueError, "env must map"),
])
def test_serve_refuses_bad_input_before_anything_starts(tmp_path: Path, kwargs: dict, error: type, needle: str) -> None:
    state = tmp_path / "state" / "job.json"
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(error, match=needle):
        serve(state_path=str(state), **kwargs)
    assert not state.parent.exists()
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_serve_refuses_a_folder_where_others_may_replace_the_state(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(PermissionError, match="others may replace files"):
        serve(["torchrun", SCRIPT, "ok", "x"], state_path=str(open_dir / "job.json"))
    assert list(open_dir.iterdir()) == []


def test_job_load_without_a_state_file_says_to_serve_first(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"serve\(\) a job first"):
        job_load(str(tmp_path / "none.json"))


def test_job_load_of_a_state_whose_server_is_gone_names_the_fix(tmp_path: Path) -> None:
    state = tmp_path / "job.json"
    fd = os.open(state, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, ('{"version": 1, "pid": 2147483600, "socket": "%s", "token": "x", "cwd": "/", "command": [], '
                  '"nnodes": 1, "nproc_per_node": 1}' % (tmp_path / "none.sock")).encode())
    os.close(fd)
    with pytest.raises(SPMDJobError, match=r"is not running .*serve\(\) the job again"):
        job_load(str(state))
    state.chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        job_load(str(state))
