"""The allocation's secret is in no process's initial environment, command line or open fds.

The kernel keeps a process's initial environment in ``/proc/PID/environ`` (readable by
the process itself and by any process of the same user) whatever the process later
removes from ``os.environ``. So host agents and procs get the secret through an
inherited pipe (local launches) or a 0600 file (launchers on other machines), read it
once at start, and keep nothing of it but the bytes in memory.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import psutil
import pytest

from secret_actors import EnvironReader
from tetrarch import TetrarchError
from tetrarch._config import ENV_SECRET_FD, ENV_SECRET_FILE
from tetrarch._runtime.plumbing import _secret
from tetrarch._runtime.plumbing._secret import SecretError, secret_pipe, take_secret
from tetrarch._runtime.plumbing._spawn import spawn_watched
from tetrarch._runtime.process._root import get_root
from tetrarch.plugins import AgentCommand, AllocatorError
from tetrarch.testing import scaled

pytestmark = pytest.mark.timeout(scaled(60))

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "secret_child.py"
SECRET = bytes(range(1, 33))
SECRET_VARS = (ENV_SECRET_FD.name, ENV_SECRET_FILE.name)


@pytest.fixture
def no_secret_vars(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in SECRET_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _fd_links(pid: int | str = "self") -> dict[int, str]:
    links = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            links[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            pass  # closed meanwhile (or the fd listdir itself used)
    return links


# ------------------------------------------------------------------ the helpers, in this process


@pytest.mark.transport_independent  # the secret's hand-over: a pipe or a file, no connection
def test_the_pipe_is_read_once_and_closed(no_secret_vars: pytest.MonkeyPatch) -> None:
    fd = secret_pipe(SECRET)
    pipe = f"pipe:[{os.fstat(fd).st_ino}]"
    assert sum(link == pipe for link in _fd_links().values()) == 1, "the write end is closed at once"
    no_secret_vars.setenv(ENV_SECRET_FD.name, str(fd))
    assert take_secret() == SECRET
    assert pipe not in _fd_links().values()
    assert ENV_SECRET_FD.name not in os.environ


@pytest.mark.transport_independent  # the secret's hand-over: a pipe or a file, no connection
def test_the_secret_file_is_private_and_deleted_by_its_reader(
    tmp_path: Path, no_secret_vars: pytest.MonkeyPatch
) -> None:
    command = AgentCommand(("agent",), {"A": "1"}, secret=SECRET)
    path = command.secret_file(tmp_path)
    info = os.stat(path)
    assert stat.S_IMODE(info.st_mode) == 0o600 and stat.S_ISREG(info.st_mode)
    assert info.st_uid == os.getuid()
    assert Path(path).parent == tmp_path
    env = command.env_for(2, secret_file=path)
    assert env == {"A": "1", "TETRARCH_HOST_INDEX": "2", ENV_SECRET_FILE.name: path}
    assert command.secret_file(tmp_path) != path, "one file per agent"
    no_secret_vars.setenv(ENV_SECRET_FILE.name, path)
    assert take_secret() == SECRET
    assert not os.path.exists(path)
    assert ENV_SECRET_FILE.name not in os.environ


@pytest.mark.transport_independent  # the secret's hand-over: a pipe or a file, no connection
def test_the_secret_file_is_created_exclusively(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An existing name (here: a planted link) is refused, never written through."""
    monkeypatch.setattr(_secret.secrets, "token_hex", lambda _n: "fixed")
    target = tmp_path / "target"
    target.write_text("untouched")
    (tmp_path / "tetrarch-secret-fixed").symlink_to(target)
    with pytest.raises(AllocatorError, match="cannot create the secret file"):
        AgentCommand(("agent",), {}, secret=SECRET).secret_file(tmp_path)
    assert target.read_text() == "untouched"


@pytest.mark.transport_independent  # the secret's hand-over: a pipe or a file, no connection
def test_the_fd_comes_first_and_a_file_named_too_is_deleted(
    tmp_path: Path, no_secret_vars: pytest.MonkeyPatch
) -> None:
    path = AgentCommand(("agent",), {}, secret=b"other").secret_file(tmp_path)
    no_secret_vars.setenv(ENV_SECRET_FILE.name, path)
    no_secret_vars.setenv(ENV_SECRET_FD.name, str(secret_pipe(SECRET)))
    assert take_secret() == SECRET
    assert not os.path.exists(path)


@pytest.mark.transport_independent  # the secret's hand-over: a pipe or a file, no connection
def test_a_missing_secret_names_both_variables(no_secret_vars: pytest.MonkeyPatch) -> None:
    with pytest.raises(SecretError, match=f"neither {ENV_SECRET_FD.name} .* nor {ENV_SECRET_FILE.name}") as caught:
        take_secret()
    assert isinstance(caught.value, TetrarchError)


@pytest.mark.transport_independent  # the secret's hand-over: a pipe or a file, no connection
def test_what_holds_no_secret_is_refused(tmp_path: Path, no_secret_vars: pytest.MonkeyPatch) -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"not hex\n")
    os.close(write_end)
    no_secret_vars.setenv(ENV_SECRET_FD.name, str(read_end))
    with pytest.raises(SecretError, match=f"{ENV_SECRET_FD.name}={read_end} does not hold"):
        take_secret()
    no_secret_vars.setenv(ENV_SECRET_FD.name, "seven")
    with pytest.raises(SecretError, match="not a file descriptor number"):
        take_secret()
    no_secret_vars.setenv(ENV_SECRET_FILE.name, str(tmp_path / "gone"))
    with pytest.raises(SecretError, match=f"cannot read the allocation's secret from {ENV_SECRET_FILE.name}="):
        take_secret()


@pytest.mark.transport_independent  # the secret's hand-over: a pipe or a file, no connection
def test_an_agent_command_keeps_its_secret_apart() -> None:
    command = AgentCommand(("agent",), {"A": "1"}, secret=SECRET)
    assert SECRET.hex() not in repr(command)
    assert SECRET.hex() not in " ".join(command.env_for(0).values())
    with pytest.raises(AllocatorError, match="carries no secret"):
        AgentCommand(("agent",), {}).secret_file("/tmp")


# ------------------------------------------------------------------ a fresh child, as procs and host agents start


def _run_child(tmp_path: Path, env: dict[str, str], secret: bytes | None) -> dict:
    out = tmp_path / "result.json"
    child = spawn_watched([sys.executable, str(SCENARIO), "child", str(out)], env, secret=secret)
    info = child.wait(scaled(30))
    if info is None:
        child.terminate(grace=1.0)
        pytest.fail("the secret child did not exit in time")
    assert info.returncode == 0, info.stderr_tail
    return json.loads(out.read_text())


@pytest.mark.isolated  # a fresh interpreter
@pytest.mark.transport_independent  # the secret's hand-over: a pipe or a file, no connection
def test_a_child_reads_the_pipe_and_keeps_nothing_of_it(tmp_path: Path) -> None:
    env = {**os.environ, ENV_SECRET_FD.name: "999"}  # a stale value is replaced
    result = _run_child(tmp_path, env, SECRET)
    assert result == {"secret": SECRET.hex(), "pipe": result["pipe"], "pipe_left_open": False, "vars_left": [],
                      "in_initial_environ": False}
    assert result["pipe"].startswith("pipe:[")
    assert result["pipe"] not in _fd_links().values(), "the parent closed its read end too"


@pytest.mark.isolated  # a fresh interpreter
@pytest.mark.transport_independent  # the secret's hand-over: a pipe or a file, no connection
def test_a_child_reads_the_secret_file_and_deletes_it(tmp_path: Path) -> None:
    command = AgentCommand((sys.executable,), dict(os.environ), secret=SECRET)
    path = command.secret_file(tmp_path)
    result = _run_child(tmp_path, command.env_for(0, secret_file=path), None)
    assert result == {"secret": SECRET.hex(), "pipe": None, "pipe_left_open": False, "vars_left": [],
                      "in_initial_environ": False}
    assert not os.path.exists(path)


@pytest.mark.isolated  # fresh interpreters
@pytest.mark.parametrize("program", ["proc", "host"])
@pytest.mark.transport_independent  # the secret's hand-over: a pipe or a file, no connection
def test_a_proc_or_host_agent_without_a_secret_says_what_is_missing(run_scenario, program: str) -> None:
    res = run_scenario(SCENARIO, "missing", program, timeout=30, env=dict.fromkeys(SECRET_VARS, ""))
    assert res.returncode != 0
    assert "SecretError: no allocation secret" in res.stderr
    assert ENV_SECRET_FD.name in res.stderr and ENV_SECRET_FILE.name in res.stderr


# ------------------------------------------------------------------ a real mesh


def _kind(proc: psutil.Process) -> str | None:
    """``host-agent`` or ``proc`` by its process title (``tetrarch proc ...``), else by its module."""
    cmdline = " ".join(proc.cmdline())
    for kind, module in (("host-agent", "_host_agent"), ("proc", "_proc_main")):
        if cmdline.startswith(f"tetrarch {kind} ") or f"tetrarch._runtime.{module}" in cmdline:
            return kind
    return None


def _tetrarch_processes() -> list[psutil.Process]:
    """The host agents and procs under this process."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if _kind(proc) is not None:
                found.append(proc)
        except psutil.NoSuchProcess:
            pass
    return found


def test_no_host_agent_or_proc_has_the_secret_in_its_environment_or_command_line(procs) -> None:
    secret = get_root().secret
    seen = _tetrarch_processes()
    assert {_kind(p) for p in seen} == {"host-agent", "proc"}
    assert len(seen) >= 5, seen  # this host's agent and the module's 4 procs at least
    for proc in seen:
        with open(f"/proc/{proc.pid}/environ", "rb") as f:
            raw = f.read()
        assert secret.hex().encode() not in raw.lower() and secret not in raw, proc
        assert f"{ENV_SECRET_FD.name}=".encode() in raw, "local launches pass the secret through a pipe"
        environ = proc.environ()
        assert not any(secret.hex() in f"{k}={v}".lower() for k, v in environ.items()), proc
        assert secret.hex() not in " ".join(proc.cmdline()).lower(), proc


def test_an_actor_does_not_find_the_secret_in_proc_self_environ(procs) -> None:
    secret = get_root().secret
    reader = procs.spawn("environ_reader", EnvironReader)
    try:
        for raw in reader.initial_environ.call().get(timeout=scaled(30)).values():
            assert secret.hex().encode() not in raw.lower() and secret not in raw
        for environ in reader.environ.call().get(timeout=scaled(30)).values():
            assert not set(environ) & set(SECRET_VARS), "read once at start, nothing left in os.environ"
            assert not any(secret.hex() in v.lower() for v in environ.values())
    finally:
        reader.stop().get(timeout=scaled(30))


def test_no_host_agent_or_proc_keeps_the_secret_pipe_open(procs) -> None:
    """A pipe end whose other end lives in another process: only stdio and the stdout and stderr pipes of
    descendants (a host agent reads both of its procs', which its zygote forked).

    The secret pipe's write end is closed before the child starts, so its read end, if
    left open, would be such a lone end in the child (or in the zygote that forked it).
    """
    zygotes = [p for p in psutil.Process().children(recursive=True)
               if " ".join(p.cmdline()).startswith("tetrarch zygote")]
    for proc in _tetrarch_processes() + zygotes:
        try:
            links = _fd_links(proc.pid)
            children_stdio = set()
            for child in proc.children(recursive=True):
                child_links = _fd_links(child.pid)
                children_stdio |= {child_links.get(1), child_links.get(2)}
        except (FileNotFoundError, psutil.NoSuchProcess):
            continue  # ended meanwhile
        pipes = [link for link in links.values() if link.startswith("pipe:")]
        lone = {fd: link for fd, link in links.items() if fd > 2 and pipes.count(link) == 1}
        assert set(lone.values()) <= children_stdio, (proc.cmdline(), lone)
