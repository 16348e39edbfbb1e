"""The admin API (``tetrarch.admin``) and ``tetrarch ps`` against a running program.

Every resource answers as its OpenAPI document says (the document itself validates);
requests without the token, or with a wrong one, get 401 and nothing else; the server binds
loopback unless told otherwise; ``tetrarch ps`` finds the program by itself and lists its
actors, a busy one with the endpoint it runs; a proc that cannot answer is shown as such.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from admin_actors import Watched
from tetrarch import ArgumentError, this_host
from tetrarch._runtime.services._stack import pyspy_path
from tetrarch.testing import scaled

pytest.importorskip("starlette", reason="the admin server needs starlette: pip install \"tetrarch[admin]\"")
pytest.importorskip("uvicorn", reason="the admin server needs uvicorn: pip install \"tetrarch[admin]\"")

import tetrarch.admin as admin

pytestmark = [pytest.mark.transport_independent, pytest.mark.timeout(scaled(120))]


@pytest.fixture(scope="module")
def admin_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("admin")
    old = os.environ.get("TETRARCH_ADMIN_DIR")
    os.environ["TETRARCH_ADMIN_DIR"] = str(folder)
    try:
        yield folder
    finally:
        if old is None:
            del os.environ["TETRARCH_ADMIN_DIR"]
        else:
            os.environ["TETRARCH_ADMIN_DIR"] = old


@pytest.fixture(scope="module")
def served(admin_dir: Path, procs: Any) -> Iterator[tuple[Any, Any]]:
    """The admin server of this test process, with a ``Watched`` mesh on the shared procs."""
    mesh = procs.spawn("watched", Watched)
    mesh.initialized.get(timeout=scaled(30))
    server = admin.serve()
    try:
        yield server, mesh
    finally:
        server.stop()
        type(mesh).stop(mesh).get(timeout=scaled(30))


def _get(server: Any, path: str, token: str | None = "") -> tuple[int, Any]:
    headers = {} if token is None else {"Authorization": f"Bearer {token or server.token}"}
    req = urllib.request.Request(server.url + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=scaled(15)) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _tetrarch(admin_dir: Path, *args: str, stdin: str | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command line ``tetrarch ARGS``, finding running programs through ``admin_dir`` (``env``: added)."""
    env = {**os.environ, "TETRARCH_ADMIN_DIR": str(admin_dir), **(env or {})}
    return subprocess.run([sys.executable, "-m", "tetrarch", *args], env=env, input=stdin, capture_output=True,
                          text=True, timeout=scaled(60))


def _ps(admin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _tetrarch(admin_dir, "ps", *args)


T = TypeVar("T")


def _until(probe: Callable[[], T], done: Callable[[T], Any], limit_s: float) -> T:
    """``probe()`` again until ``done`` says its result will do, or ``limit_s`` (scaled) passed: the last result."""
    deadline = time.monotonic() + scaled(limit_s)
    while True:
        result = probe()
        if done(result) or time.monotonic() > deadline:
            return result


def _busy_watched(admin_dir: Path) -> subprocess.CompletedProcess[str]:
    """``ps`` of the busy actors of the ``watched`` mesh, once one is busy (or the bound passed)."""
    return _until(lambda: _ps(admin_dir, "--json", "--mesh", "watched", "--state", "busy"),
                  lambda res: res.returncode != 0 or json.loads(res.stdout or "[]"), 30)


#: Whether py-spy is where the host agents look for it.
HAVE_PYSPY = pyspy_path() is not None


def test_the_openapi_document_validates_and_every_resource_answers_as_it_says(served) -> None:
    from jsonschema import Draft202012Validator
    from openapi_spec_validator import validate

    server, _mesh = served
    status, doc = _get(server, "/openapi.json")
    assert status == 200
    validate(doc)
    for path, item in doc["paths"].items():
        required = [p["name"] for p in item["get"].get("parameters", []) if p["required"]]
        status, body = _get(server, path + ("?mesh=watched&rank=0" if required else ""))
        assert status == 200, (path, body)
        schema = {**item["get"]["responses"]["200"]["content"]["application/json"]["schema"],
                  "components": doc["components"]}
        errors = list(Draft202012Validator(schema).iter_errors(body))
        assert not errors, f"{path}: {errors[0].message} at {list(errors[0].absolute_path)}"


def test_resources_describe_the_running_program(served) -> None:
    server, mesh = served
    before = {a["rank"]: a["handled"] for a in _get(server, "/api/v1/actors?mesh=watched")[1]}
    mesh.rank.call().get(timeout=scaled(30))
    _, actors = _get(server, "/api/v1/actors?mesh=watched")
    assert sorted(a["rank"] for a in actors) == [0, 1, 2, 3]
    assert all(a["handled"] == before[a["rank"]] + 1 and a["last_endpoint"] == "rank" for a in actors)
    assert all(a["endpoints"]["rank"]["calls"] >= 1 and a["busy_s"] > 0 for a in actors)
    assert {a["class"] for a in actors} == {"admin_actors.Watched"} and {a["state"] for a in actors} == {"idle"}
    _, procs = _get(server, "/api/v1/procs")
    mine = {a["pid"] for a in actors}
    assert mine <= {p["pid"] for p in procs if p["state"] == "running" and p["rss_bytes"] > 0}
    _, meshes = _get(server, "/api/v1/meshes")
    (watched,) = [m for m in meshes if m["name"] == "watched"]
    assert watched["labels"] == ["gpus"] and watched["sizes"] == [4] and watched["state"] == "running"
    _, hosts = _get(server, "/api/v1/hosts")
    assert any(h["state"] == "running" and h["allocator"] == "local" for h in hosts)
    _, backends = _get(server, "/api/v1/backends")
    assert backends["client"]["transport"] and backends["procs"]


def test_requests_without_the_token_get_401_and_nothing_else(served) -> None:
    server, _ = served
    for token in (None, "wrong", server.token[:-1]):
        for path in ("/api/v1/actors", "/openapi.json", "/", "/nowhere"):
            status, body = _get(server, path, token=token)
            assert (status, body) == (401, {"error": "unauthorized"}), (token, path)


def test_the_server_binds_loopback_unless_told_otherwise(served) -> None:
    with pytest.raises(ArgumentError, match="allow_remote=True"):
        admin.serve(host="0.0.0.0")
    assert served[0].url.startswith("http://127.0.0.1:")
    assert oct(Path(served[0].announcement).stat().st_mode & 0o777) == "0o600"


def test_ps_lists_the_actors_and_shows_a_busy_one_with_its_endpoint(served, admin_dir: Path, tmp_path) -> None:
    _server, mesh = served
    flag = tmp_path / "release"
    blocked = mesh.slice(gpus=2).block_until.call_one(str(flag), scaled(60))
    try:
        res = _busy_watched(admin_dir)
        assert res.returncode == 0, res.stderr
        rows = json.loads(res.stdout)
        assert [(r["rank"], r["endpoint"]) for r in rows] == [(2, "block_until")]
        assert rows[0]["running_for_s"] > 0
    finally:
        flag.touch()
    assert blocked.get(timeout=scaled(30)) is True
    res = _ps(admin_dir, "--mesh", "watched")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:5] == ["MESH", "RANK", "POINT", "CLASS", "STATE"]
    assert len([ln for ln in lines[1:] if ln.startswith("watched")]) == 4


def test_ps_says_when_no_program_serves_the_api(tmp_path) -> None:
    res = _ps(tmp_path)
    assert res.returncode == 1 and "no running tetrarch program serves the admin API" in res.stderr
    assert "configure(admin=True)" in res.stderr


def test_a_stopped_proc_is_shown_not_answering_and_never_blocks_the_api(served) -> None:
    server, _ = served
    pm = this_host().spawn_procs(per_host={"gpus": 1}, name="frozen")
    try:
        (proc,) = pm._procs
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            status, procs = _get(server, "/api/v1/procs")
            elapsed = time.monotonic() - t0
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert status == 200
        (row,) = [p for p in procs if p["pid"] == proc.pid]
        assert row["state"] == "not answering" and row["rss_bytes"] is None
        assert elapsed < scaled(10), f"the API waited {elapsed:.1f} s for a stopped proc"
    finally:
        pm.stop().get(timeout=scaled(60))


def test_stack_marks_the_actor_thread_and_the_endpoint_it_is_in(served, admin_dir: Path, tmp_path) -> None:
    _server, mesh = served
    flag = tmp_path / "release"
    blocked = mesh.slice(gpus=1).block_until.call_one(str(flag), scaled(60))
    try:
        _busy_watched(admin_dir)
        res = _tetrarch(admin_dir, "stack", "watched[1]", "--json")
    finally:
        flag.touch()
    assert blocked.get(timeout=scaled(30)) is True
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["state"] == "running" and out["rank"] == 1
    (actor,) = [t for t in out["threads"] if t["actor"]]
    assert actor["endpoint"] == "block_until" and "in block_until" in actor["stack"]
    if HAVE_PYSPY:
        assert out["pyspy"] and "block_until" in out["pyspy"], out["notes"]
    else:
        assert any("py-spy is not installed" in n for n in out["notes"])
    text = _tetrarch(admin_dir, "stack", "watched[1]")
    assert "<- actor watched" in text.stdout and text.returncode == 0


def test_stack_says_so_for_an_unknown_actor(served, admin_dir: Path) -> None:
    for actor, says in (("nosuch[0]", "no actor mesh named 'nosuch'"), ("watched[9]", "has no rank 9"),
                        ("watched", "has 4 actors: say which")):
        res = _tetrarch(admin_dir, "stack", actor)
        assert res.returncode == 1 and says in res.stderr, (actor, res.stderr)


def test_stack_sees_a_proc_held_in_a_c_call_with_py_spy(served) -> None:
    if not HAVE_PYSPY:
        pytest.skip("py-spy is not installed (pip install py-spy): a proc that holds its GIL cannot be seen")
    server, _ = served
    pm = this_host().spawn_procs(per_host={"gpus": 1}, name="gil")
    try:
        mesh = pm.spawn("gil", Watched)
        mesh.initialized.get(timeout=scaled(30))
        (proc,) = pm._procs
        mesh.hold_gil.call_one()
        status, out = _until(lambda: _get(server, "/api/v1/stack?mesh=gil&rank=0"),
                             lambda got: got[0] != 200 or (got[1]["state"] == "not answering" and got[1]["pyspy"]), 60)
        assert status == 200, out
        assert out["state"] == "not answering" and out["threads"] is None
        assert "hold_gil" in out["pyspy"], out
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        pm.stop().get(timeout=scaled(60))


def test_the_admin_setting_serves_a_program_without_code_for_it(tmp_path) -> None:
    env = {**os.environ, "TETRARCH_ADMIN": "1", "TETRARCH_ADMIN_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    prog = subprocess.Popen([sys.executable, str(Path(__file__).parent / "scenarios" / "admin_env.py")], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert prog.stdout is not None and prog.stdout.readline().strip() == "READY"
        res = _ps(tmp_path, "--json")
        assert res.returncode == 0, res.stderr
        assert sorted((r["mesh"], r["rank"]) for r in json.loads(res.stdout)) == [("from_env", 0), ("from_env", 1)]
        assert list(tmp_path.glob("*.json")) == [tmp_path / f"{prog.pid}.json"]
    finally:
        _out, err = prog.communicate("\n", timeout=scaled(60))
    assert prog.returncode == 0, err
    assert not list(tmp_path.glob("*.json")), "the announcement is removed when the program ends"


def test_doctor_mesh_passes_a_healthy_program_and_fails_a_stopped_proc(served, admin_dir: Path) -> None:
    def doctor() -> tuple[int, list[dict[str, Any]]]:
        res = _tetrarch(admin_dir, "doctor", "mesh", "--json", "--slow-ms", "5000")
        return res.returncode, json.loads(res.stdout or "[]")

    status, checks = doctor()
    assert status == 0, checks
    kinds = {c["kind"] for c in checks}
    assert kinds == {"host agent", "proc", "actor"} and all(c["status"] == "pass" for c in checks)
    assert len([c for c in checks if c["kind"] == "actor" and c["name"].startswith("watched")]) == 4
    pm = this_host().spawn_procs(per_host={"gpus": 1}, name="doctored")
    try:
        pm.spawn("doctored", Watched).initialized.get(timeout=scaled(30))
        (proc,) = pm._procs
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            status, checks = doctor()
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert status == 1
        failed = {(c["kind"], c["pid"]) for c in checks if c["status"] == "fail"}
        assert failed == {("proc", proc.pid), ("actor", proc.pid)}, checks
        text = _tetrarch(admin_dir, "doctor", "mesh")
        assert "pass" in text.stdout and text.returncode in (0, 1)
    finally:
        pm.stop().get(timeout=scaled(60))


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _rendered(url: str, profile: Path) -> str:
    """The dashboard's body once its script has read the API (headless Chromium's DOM after load)."""
    browser = _chromium()
    assert browser is not None
    res = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                          "--virtual-time-budget=10000", "--dump-dom", url],
                         capture_output=True, text=True, timeout=scaled(90))
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.split("<script>")[0]


def test_the_dashboard_shows_the_actors_and_a_failure_in_a_real_browser(served, faults, tmp_path) -> None:
    if _chromium() is None:
        pytest.skip("Chromium is not installed (Debian's chromium package: make deps-apt installs it)")
    server, _ = served
    url = f"{server.url}/dashboard?token={server.token}"
    _get(server, "/api/v1/actors")  # the procs count calls from the first look on
    served[1].rank.call().get(timeout=scaled(30))
    page = _rendered(url, tmp_path / "profile")
    assert "updated" in page, page[-2000:]
    assert page.count('<li class="actor">watched{') == 4, page
    assert '<tr class="endpoint"><td>watched.rank</td>' in page, page
    pm = this_host().spawn_procs(per_host={"gpus": 1}, name="doomed")
    try:
        doomed = pm.spawn("doomed", Watched)
        doomed.initialized.get(timeout=scaled(30))
        (proc,) = pm._procs
        os.kill(proc.pid, signal.SIGKILL)
        faults.wait(1)
        page = _rendered(url, tmp_path / "profile")
        assert '<li class="failure"><b>doomed' in page and "SIGKILL" in page, page
    finally:
        pm.stop().get(timeout=scaled(60))
    status, _ = _get(server, "/dashboard", token=None)
    assert status == 401, "the page itself needs the token"


def _scenario(name: str, env: dict[str, str]) -> subprocess.Popen[str]:
    env = {**os.environ, **env,
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(Path(__file__).parent / "scenarios" / name)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_breakpoint_in_an_endpoint_is_debugged_with_tetrarch_debug(tmp_path) -> None:
    pexpect = pytest.importorskip("pexpect", reason="the session is driven through a pseudo-terminal: pip install "
                                                    "pexpect")
    prog = _scenario("admin_debug.py", {"TETRARCH_ADMIN": "1", "TETRARCH_ADMIN_DIR": str(tmp_path)})
    env = {**os.environ, "TETRARCH_ADMIN_DIR": str(tmp_path)}
    try:
        listed = _until(lambda: _tetrarch(tmp_path, "debug", "--list"),  # both ranks pause: until both are listed
                        lambda res: res.stdout.count("stepper") >= 2, 60)
        assert "stepper" in listed.stdout and "in step" in listed.stdout, listed.stdout + listed.stderr
        several = _tetrarch(tmp_path, "debug")
        assert several.returncode == 1 and "--attach" in several.stderr
        for rank, x in ((1, 5), (0, 1)):
            child = pexpect.spawn(sys.executable, ["-m", "tetrarch", "debug", "--attach", f"stepper[{rank}]"],
                                  env=env, encoding="utf-8", timeout=scaled(30))
            child.expect(r"\(Pdb\) ")
            child.sendline("p y")
            child.expect(str(x * 2))
            child.expect(r"\(Pdb\) ")
            child.sendline("n")
            child.expect(r"\(Pdb\) ")
            child.sendline("p z")
            child.expect(str(x * 2 + 1))
            child.expect(r"\(Pdb\) ")
            child.sendline("bt")
            child.expect("step")
            child.expect(r"\(Pdb\) ")
            child.sendline("c")
            child.expect(pexpect.EOF)
        out, err = prog.communicate(timeout=scaled(60))
    finally:
        if prog.poll() is None:
            prog.kill()
            prog.communicate()
    assert prog.returncode == 0, err
    assert "RESULT 11" in out and "OTHER 3" in out
    assert "is paused in breakpoint()" in err and "tetrarch debug" in err


def test_breakpoint_without_a_debugger_to_attach_is_skipped_with_a_warning(tmp_path) -> None:
    prog = _scenario("admin_debug.py", {"TETRARCH_ADMIN": "0", "TETRARCH_ADMIN_DIR": str(tmp_path)})
    out, err = prog.communicate(timeout=scaled(90))
    assert prog.returncode == 0, err
    assert "RESULT 11" in out and "OTHER 3" in out
    assert "skipped: no debugger can attach to this program" in err and "TETRARCH_ADMIN=1" in err


def test_top_draws_the_busiest_actors_and_endpoints(served, admin_dir: Path, tmp_path) -> None:
    pytest.importorskip("rich", reason="tetrarch top draws with Rich: pip install \"tetrarch[admin]\"")
    _server, mesh = served
    flag = tmp_path / "release"
    blocked = mesh.slice(gpus=3).block_until.call_one(str(flag), scaled(60))
    try:
        res = _until(lambda: _tetrarch(admin_dir, "top", "--once", "--interval", "0.2", env={"COLUMNS": "200"}),
                     lambda res: res.returncode != 0 or "block_until" in res.stdout, 30)
        assert res.returncode == 0, res.stderr
    finally:
        flag.touch()
    assert blocked.get(timeout=scaled(30)) is True
    out = res.stdout
    assert "procs (" in out and "actors (" in out and "endpoints" in out
    busiest = [ln for ln in out.splitlines() if "watched{" in ln]
    assert "block_until" in busiest[0] and "busy" in busiest[0], out


def test_breakpoint_in_a_script_run_through_spmd_is_debugged_too(tmp_path) -> None:
    prog = _scenario("admin_spmd.py", {"TETRARCH_ADMIN": "1", "TETRARCH_ADMIN_DIR": str(tmp_path)})
    try:
        listed = _until(lambda: _tetrarch(tmp_path, "debug", "--list"),
                        lambda res: "admin_spmd_script.py" in res.stdout, 60)
        session = _tetrarch(tmp_path, "debug", stdin="p x\nc\n")
        out, err = prog.communicate(timeout=scaled(60))
    finally:
        if prog.poll() is None:
            prog.kill()
            prog.communicate()
    assert "admin_spmd_script.py" in listed.stdout, listed.stdout + listed.stderr
    assert "(Pdb) 40" in session.stdout, session.stdout + session.stderr
    assert prog.returncode == 0, err
    assert "RESULT [True]" in out and "after 41" in out
