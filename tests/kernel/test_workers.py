"""Workers started by something else: ``run_worker_loop_forever`` and ``attach_to_workers`` (Monarch's names).

Real processes on 127.0.0.1: two workers started with subprocess (port 0; each prints
the address it listens at), clients in their own processes (each client a fresh world:
its runtime's secret, its procs, its exit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from tetrarch import (
    ArgumentError,
    NotSupportedError,
    ProcessStartError,
    UsageError,
    attach_to_workers,
    run_worker_loop_forever,
)
from tetrarch._runtime.meshes._worker_auth import SealedSecret, seal_secret, unseal_secret
from tetrarch._runtime.plumbing._secret import SecretError
from tetrarch.job import new_secret_file
from tetrarch.testing import scaled, still_running

pytestmark = [pytest.mark.transport_independent, pytest.mark.isolated, pytest.mark.timeout(scaled(180))]

HERE = Path(__file__).parent
CLIENT = HERE / "scenarios" / "attach_client.py"
WORKER = ("import sys; from tetrarch import run_worker_loop_forever; "
          "run_worker_loop_forever(address=sys.argv[1], secret_file=sys.argv[2])")


def _read_line(stream: Any, timeout: float) -> str:
    """The first line of ``stream``, waiting at most ``timeout`` s ('' if none came)."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0] if box else ""


class Worker:
    """One ``run_worker_loop_forever`` process at ``address`` (default 127.0.0.1, a free port), under ``wrap``."""

    def __init__(self, secret: Path, address: str = "tcp://127.0.0.1:0", wrap: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
               **(env or {})}
        self.proc = subprocess.Popen([*wrap, sys.executable, "-c", WORKER, address, str(secret)], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        line = _read_line(self.proc.stdout, scaled(60))
        if not line.startswith("tetrarch worker listening at "):
            self.proc.kill()
            errors = self.proc.communicate(timeout=scaled(10))[1]
            raise AssertionError(f"the worker did not start: {line!r} {errors}")
        self.address = line.split()[-1]

    def children(self) -> list[int]:
        try:
            return [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        """SIGTERM (the worker kills its procs and exits), SIGKILL of its session past a bound."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(scaled(20))
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    return Path(new_secret_file(tmp_path / "keys" / "secret"))


@pytest.fixture
def workers(secret: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    try:
        started += [Worker(secret), Worker(secret)]
        yield started
    finally:
        for w in started:
            w.stop()


def _gone(pids: list[int]) -> list[int]:
    """Those of ``pids`` still alive after a bounded wait for them to end."""
    return still_running(pids, scaled(30))


@pytest.fixture
def client(run_scenario: Callable[..., Any]) -> Callable[..., dict]:
    def run(*args: str, env: dict[str, str] | None = None) -> dict:
        res = run_scenario(CLIENT, *args, timeout=90, pythonpath=[HERE], env=env)
        lines = res.stdout.strip().splitlines()
        assert lines, res.stderr
        return json.loads(lines[-1])

    return run


def test_clients_attach_one_after_the_other_spawn_and_call_on_the_same_workers(workers, secret, client) -> None:
    addresses = [w.address for w in workers]
    first = client("call", str(secret), *addresses)
    assert "error" not in first, first
    agents = {w.proc.pid for w in workers}
    assert len(first["pids"]) == 4 and {ppid for _pid, ppid in first["pids"].values()} == agents, \
        "every proc is a child of a worker"
    second = client("call", str(secret), *addresses)
    assert "error" not in second, second
    assert {ppid for _pid, ppid in second["pids"].values()} == agents, "the next client gets the same workers"
    assert all(w.proc.poll() is None for w in workers), "workers serve forever"
    assert _gone([pid for pid, _ in first["pids"].values()]) == []
    assert _gone([pid for pid, _ in second["pids"].values()]) == []


def test_one_client_attaches_a_worker_once_at_a_time_and_again_after_shutdown(workers, secret, client) -> None:
    out = client("twice", str(secret), workers[0].address)
    assert "refused the handshake" in out.get("refused", "") and "serves another client" in out["refused"], out
    assert {ppid for _p, ppid in out["pids"].values()} == {workers[0].proc.pid}, out


def test_a_client_with_another_secret_is_refused_and_the_worker_serves_on(workers, secret, client,
                                                                         tmp_path: Path) -> None:
    other = new_secret_file(tmp_path / "other")
    refused = client("call", other, workers[0].address)
    assert refused.get("error") == "ProcessStartError", refused
    assert "attach failed" in refused["message"] and workers[0].address in refused["message"], refused
    assert f"the worker at {workers[0].address} refused the handshake: it holds another secret" in \
        refused["message"], refused
    assert workers[0].proc.poll() is None and workers[0].children() == []
    assert "error" not in client("call", str(secret), workers[0].address), "the worker still serves"


def _holding_client(secret: Path, worker: Worker, **env: str) -> tuple[subprocess.Popen, list[int]]:
    """A client that attached to ``worker``, spawned procs there and holds them; and the procs' pids."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]), **env}
    holder = subprocess.Popen([sys.executable, str(CLIENT), "hold", str(secret), worker.address], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = _read_line(holder.stdout, scaled(90))
    if not line:
        _end(holder)
        raise AssertionError("the holding client printed nothing")
    pids = [pid for pid, _ in json.loads(line)["pids"].values()]
    assert set(pids) <= set(worker.children())
    return holder, pids


def _end(holder: subprocess.Popen) -> None:
    holder.kill()  # SIGKILL: no goodbye
    holder.wait()
    holder.stdin.close()
    holder.stdout.close()


def test_a_worker_whose_client_died_kills_its_procs_and_takes_the_next(workers, secret, client) -> None:
    holder, pids = _holding_client(secret, workers[0])
    try:
        busy = client("call", str(secret), workers[0].address)
        assert busy.get("error") == "ProcessStartError", busy
        refusal = (f"the worker at {workers[0].address} refused the handshake: it holds another secret, or it "
                   f"serves another client right now")
        assert refusal in busy["message"], busy
        assert busy["seconds"] < scaled(15), f"the refusal must come at once, not after a timeout: {busy}"
    finally:
        _end(holder)
    assert _gone(pids) == [], "the worker must kill the procs of a client that died"
    assert "error" not in client("call", str(secret), workers[0].address), "and serve the next client"


def test_a_worker_whose_client_stops_answering_kills_its_procs(secret, client) -> None:
    worker = Worker(secret, env={"TETRARCH_ORPHAN_TIMEOUT": "3"})
    try:
        # The procs give their owner a long time: what ends them is the worker's verdict.
        holder, pids = _holding_client(secret, worker, TETRARCH_ORPHAN_TIMEOUT="120")
        try:
            holder.send_signal(signal.SIGSTOP)  # connected, silent
            assert _gone(pids) == [], "a worker whose client stopped answering kills its procs"
            assert worker.proc.poll() is None
        finally:
            holder.send_signal(signal.SIGCONT)
            _end(holder)
        assert "error" not in client("call", str(secret), worker.address), "and serves the next client"
    finally:
        worker.stop()


def test_trust_all_connections_is_refused_with_the_fix(secret) -> None:
    for call in (lambda: attach_to_workers(workers=["tcp://127.0.0.1:1"], ca="trust_all_connections"),
                 lambda: run_worker_loop_forever(address="tcp://127.0.0.1:0", ca="trust_all_connections")):
        with pytest.raises(ArgumentError, match=r"tetrarch requires the secret.*secret_file=PATH"):
            call()
    with pytest.raises(NotSupportedError, match="TLS certificates"):
        run_worker_loop_forever(address="tcp://127.0.0.1:0", ca=b"---CERT---", secret_file=secret)


@pytest.mark.parametrize("address", ["tcp://*:26600", "tcp://0.0.0.0:26600", "tcp://h:1@tcp://0.0.0.0:1"])
def test_a_worker_never_binds_a_wildcard(secret, address: str) -> None:
    with pytest.raises(ArgumentError, match=r"never a wildcard|alias form"):
        run_worker_loop_forever(address=address, secret_file=secret)


def test_the_secret_file_must_be_private_and_long_enough(tmp_path: Path) -> None:
    with pytest.raises(SecretError, match="pass secret_file=PATH"):
        run_worker_loop_forever(address="tcp://127.0.0.1:0")
    loose = tmp_path / "loose"
    loose.write_text("x" * 64)
    loose.chmod(0o644)
    with pytest.raises(SecretError, match=f"chmod 600 {loose}"):
        run_worker_loop_forever(address="tcp://127.0.0.1:0", secret_file=loose)
    short = tmp_path / "short"
    short.write_text("abc")
    short.chmod(0o600)
    with pytest.raises(SecretError, match="32 to 4096 characters"):
        attach_to_workers(workers=["tcp://127.0.0.1:1"], secret_file=short)
    made = Path(new_secret_file(tmp_path / "new" / "secret"))
    assert made.stat().st_mode & 0o777 == 0o600 and made.parent.stat().st_mode & 0o777 == 0o700
    with pytest.raises(FileExistsError):
        new_secret_file(made)


def test_a_worker_job_is_reused_by_a_later_process_from_its_cache(workers, secret, client, tmp_path: Path) -> None:
    cache = tmp_path / "state" / "job_state.pkl"
    addresses = [w.address for w in workers]
    first = client("job", str(secret), str(cache), *addresses)
    assert "error" not in first, first
    assert cache.stat().st_mode & 0o777 == 0o600 and cache.parent.stat().st_mode & 0o777 == 0o700
    second = client("job", str(secret), str(cache), *addresses)
    assert "error" not in second, second
    assert second["apply_id"] == first["apply_id"], "the second run connected to the cached job"
    agents = {w.proc.pid for w in workers}
    assert {ppid for _p, ppid in second["pids"].values()} == agents == {ppid for _p, ppid in first["pids"].values()}


FAKE_HOSTS = HERE.parents[1] / "scripts" / "fake-hosts"


def _fake_hosts(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FAKE_HOSTS), *args], capture_output=True, text=True, timeout=scaled(60))


@pytest.fixture
def namespaced_hosts() -> Iterator[list[tuple[str, str]]]:
    """Two emulated hosts (scripts/fake-hosts) as (name, IP): those up already, else two made (and removed)
    here; skips without root."""
    if os.geteuid() != 0 or not FAKE_HOSTS.exists():
        pytest.skip("network-namespace hosts need root and scripts/fake-hosts")
    status = _fake_hosts("status")
    made = False
    if status.returncode == 3:  # none up: make two (an existing set, of any size, is used as it is)
        up = _fake_hosts("up", "2")
        if up.returncode != 0:
            pytest.skip(f"scripts/fake-hosts up 2 failed: {up.stderr.strip()}")
        made = True
        status = _fake_hosts("status")
    try:
        hosts = [(line.split()[0], line.split()[2].split("/")[0]) for line in status.stdout.splitlines()
                 if " UP 10.99.0." in line and not line.startswith("bridge")]
        if status.returncode != 0 or len(hosts) < 2:
            pytest.skip(f"fewer than two fake hosts are up: {status.stdout.strip()}")
        yield hosts[:2]
    finally:
        if made:
            _fake_hosts("down")


def test_workers_on_two_namespaced_hosts_serve_a_client_in_the_root_namespace(namespaced_hosts, secret,
                                                                              client) -> None:
    started: list[Worker] = []
    try:
        for host, ip in namespaced_hosts:
            started.append(Worker(secret, address=f"tcp://{ip}:0", wrap=[str(FAKE_HOSTS), "exec", host]))
        assert all(w.address.startswith("tcp://10.99.0.") for w in started), [w.address for w in started]
        out = client("call", str(secret), *(w.address for w in started))
        assert "error" not in out, out
        assert len({ppid for _pid, ppid in out["pids"].values()}) == 2, "one worker per host"
    finally:
        for w in started:
            w.stop()


def test_attaching_from_a_running_runtime_is_allowed_and_a_worker_needs_a_process_of_its_own(
        secret, tmp_path: Path) -> None:
    from tetrarch._config import configured
    from tetrarch._runtime.process._root import get_root

    root = get_root()  # this process's runtime runs (on the suite's transport), with its own random secret
    scheme = root.router.address.split("://", 1)[0]
    nobody = f"{scheme}://{tmp_path}/nobody" if scheme.endswith("ipc") else f"{scheme}://127.0.0.1:1"
    with configured(host_start_timeout=1.0, connect_timeout=1.0):  # nothing listens there: dialled again for 1 s
        mesh = attach_to_workers(workers=[nobody], secret_file=secret)  # no SecretError: it seals its own
        with pytest.raises(ProcessStartError, match="attach failed: nothing answered there for 1 s"):
            mesh.initialized.get(timeout=scaled(30))
    with pytest.raises(UsageError, match="must run in a process of its own"):
        run_worker_loop_forever(address="tcp://127.0.0.1:0", secret_file=secret)


def test_a_client_that_uses_this_host_first_attaches_and_its_actors_call_across(workers, secret, client) -> None:
    # this_host() starts the runtime first: on the workers' transport (the attach checks it), with its own secret.
    env = {"TETRARCH_TRANSPORT": os.environ.get("TETRARCH_TRANSPORT", "tcp")}
    out = client("mixed", str(secret), *(w.address for w in workers), env=env)
    assert "error" not in out, out
    local_pid, local_agent = out["local"]
    agents = {w.proc.pid for w in workers}
    assert local_agent not in agents, "this_host()'s proc is a child of the client's own host agent"
    remote = {tuple(v) for v in out["remote"].values()}
    assert {ppid for _pid, ppid in remote} == agents, "one proc per worker"
    assert tuple(out["remote_asks_local"]) == (local_pid, local_agent), "a worker's actor reached this_host's"
    assert tuple(out["local_asks_remote"]) in remote, "this_host's actor reached a worker's"
    assert tuple(out["remote_asks_remote"]) in remote
    assert _gone([pid for pid, _ in remote] + [local_pid]) == []
    assert all(w.children() == [] for w in workers), "the session ended: the worker killed nothing left behind"


def test_a_second_client_is_refused_at_once_while_the_first_is_served(workers, secret, client) -> None:
    holder, pids = _holding_client(secret, workers[0])
    try:
        started = time.monotonic()
        second = client("call", str(secret), workers[0].address, workers[1].address)
        took = time.monotonic() - started
        assert second.get("error") == "ProcessStartError", second
        assert f"the worker at {workers[0].address} refused the handshake" in second["message"], second
        assert second["seconds"] < scaled(15) and took < scaled(60), second
        assert set(pids) <= set(workers[0].children()), "the first client's procs live on"
        assert workers[1].children() == [], "the worker that accepted the second client was released"
    finally:
        _end(holder)
    assert _gone(pids) == []
    assert "error" not in client("call", str(secret), workers[0].address, workers[1].address), \
        "both workers serve the next client"


def test_the_sealed_secret_travels_only_with_a_valid_tag() -> None:
    worker, other = b"w" * 64, b"o" * 64
    for session in (bytes(range(32)), b"s" * 100):  # a 32-byte secret, and a longer one (counter-mode pad)
        sealed = seal_secret(worker, session)
        assert session not in sealed.sealed and len(sealed.sealed) == len(session)
        assert unseal_secret(worker, sealed) == session
        assert seal_secret(worker, session).nonce != sealed.nonce, "a fresh nonce per seal"
        with pytest.raises(SecretError, match="integrity check"):
            unseal_secret(other, sealed)
        forged = SealedSecret(sealed.nonce, bytes([sealed.sealed[0] ^ 1]) + sealed.sealed[1:], sealed.tag)
        with pytest.raises(SecretError, match="integrity check"):
            unseal_secret(worker, forged)
        with pytest.raises(SecretError, match="malformed"):
            unseal_secret(worker, SealedSecret(sealed.nonce[:5], sealed.sealed, sealed.tag))


def test_a_worker_refuses_an_attach_whose_seal_has_a_bad_tag_and_serves_on(workers, secret, client) -> None:
    out = client("badtag", str(secret), workers[0].address)
    assert out.get("ok") is False and "integrity check" in out.get("answer", ""), out
    assert workers[0].children() == []
    assert "error" not in client("call", str(secret), workers[0].address), "the worker still serves"


_PLUGIN_LIBS = {"zmq": "zmq", "nng": "pynng"}


@pytest.mark.parametrize(("transport", "address"), [
    ("tcp", "tcp://127.0.0.1:0"),
    ("ipc", "ipc://{tmp}/worker.sock"),
    ("zmq", "zmq+tcp://127.0.0.1:0"),
    ("zmq", "zmq+ipc://{tmp}/worker.sock"),
    ("nng", "nng+tcp://127.0.0.1:0"),
    ("nng", "nng+ipc://{tmp}/worker.sock"),
])
def test_a_worker_rekeys_at_its_address_on_every_transport(secret, client, tmp_path: Path, transport: str,
                                                          address: str) -> None:
    """Idle (worker secret) -> serving (the client's) -> idle -> serving, at one address: each
    transport must listen there again at once (tcp: SO_REUSEADDR; a path socket: removed at close)."""
    if transport in _PLUGIN_LIBS:
        pytest.importorskip(_PLUGIN_LIBS[transport], reason=f"the {transport} transport needs its library")
    env = {"TETRARCH_TRANSPORT": transport}
    worker = Worker(secret, address=address.format(tmp=tmp_path), env=env)
    try:
        out = client("twice", str(secret), worker.address, env=env)
        assert "refused the handshake" in out.get("refused", ""), out
        assert {ppid for _p, ppid in out["pids"].values()} == {worker.proc.pid}, out
        assert worker.proc.poll() is None
    finally:
        worker.stop()


def test_attach_dials_again_until_a_worker_started_a_moment_ago_listens(secret, client, tmp_path: Path) -> None:
    """Monarch's getting_started: ``subprocess.Popen`` the workers, then ``attach_to_workers`` at
    once. The worker here starts 2 s late (its command waits first), so the client's first dials
    find nothing at the address; it dials again until the worker listens."""
    address = f"ipc://{tmp_path}/late-worker"
    started: list[Worker] = []
    wrap = ["sh", "-c", 'sleep 2; exec "$@"', "sh"]  # starts the worker's python 2 s from now
    late = threading.Thread(target=lambda: started.append(Worker(secret, address, wrap=wrap)))
    late.start()
    try:
        got = client("call", str(secret), address)
        assert "error" not in got, got
        late.join(scaled(60))
        assert started and {ppid for _pid, ppid in got["pids"].values()} == {started[0].proc.pid}
    finally:
        late.join(scaled(60))
        for w in started:
            w.stop()
