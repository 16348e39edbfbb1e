"""Suite-wide fixtures and the leaked-process check.

Leak check
----------
When the session is configured, a fresh marker ``TETRARCH_TEST_SESSION=<uuid>`` is put
into ``os.environ``. Every process the suite starts inherits it: the children of the
pytest process, and their children in turn (tetrarch passes its environment down to
host agents and procs). When the session finishes, every process on the machine whose
environment carries this marker (other than pytest itself) is a straggler. Stragglers
get up to ``LEAK_GRACE_S`` seconds to exit; whatever is still running after that is
killed, listed (pid and command line), and the session fails (exit status 1) even if
every test passed.

Fresh interpreters
------------------
Tests that need a fresh client process (atexit behaviour, signals, first-import side
effects, ...) run a *scenario*: a real module with a ``main()`` (e.g.
``tests/kernel/scenarios/<name>.py``) that takes its parameters from ``sys.argv``.
``run_scenario(path, *args, timeout, env=None, pythonpath=(), cwd=None)`` (a fixture)
runs one in a new ``sys.executable`` and returns its ``CompletedProcess``;
``start_scenario`` starts one and returns the ``Popen`` (killed at teardown). Both
fixtures insist that the test carries ``@pytest.mark.isolated``. ``run_isolated(code,
timeout, env=None)`` runs a ``-c`` snippet instead; prefer a scenario module.

Once per transport
------------------
``make test`` runs tests/kernel once more per plugin transport
(tests/transport/test_every_transport.py), leaving out the tests marked
``transport_independent``. A new kernel test that sends anything across processes over
the suite's transport stays unmarked; one that involves no message of that transport
(pure logic, a transport it pins itself, a child that never connects, OS-level stalls)
is marked, with a comment saying why. The full rule is in that module's docstring.
Elsewhere (tests/spmd, tests/plugins, ...) the mark is not needed: only tests/kernel is
run again.

Shared fixtures
---------------
``procs``: one 4-proc mesh (``{"gpus": 4}`` on ``this_host()``) per test folder, shared by
the folder's modules and stopped when the run leaves the folder (or replaced when a module
left it stopped, or a proc dead or frozen); a test that kills, stops or freezes procs spawns
its own mesh. A folder whose tests need another mesh overrides ``procs`` in its conftest.py.
``_shutdown_tetrarch_at_session_end`` (autouse, session): stops every proc mesh and host
agent the session started (``shutdown_context``) before the leak check looks for stragglers.

Time limits
-----------
Every wall-clock bound is written in nominal seconds and multiplied by the
``TETRARCH_TEST_SLOWDOWN`` factor (:func:`tetrarch.testing.scaled`): helpers that take a
timeout (``run_scenario``, ``Collector.wait``) scale it themselves; anywhere else the
test writes ``scaled(N)``, including ``pytest.mark.timeout(scaled(N))``.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from tetrarch.testing import scaled
from tetrarch.testing.scenario import Started, require_isolated, run_python, run_scenario

if TYPE_CHECKING:
    from tetrarch import ProcMesh

#: The environment variable that marks every process started by this test session.
SESSION_ENV = "TETRARCH_TEST_SESSION"
#: Seconds stragglers get to exit on their own before they are killed (nominal: scaled).
LEAK_GRACE_S = 10.0
#: Seconds the test process may take to exit after the last hook (atexit handlers, threads).
EXIT_LIMIT_S = 120.0
#: Pause between an empty scan and the scan that confirms it.
SETTLE_S = 0.25

_marker_key = pytest.StashKey[str]()
_shm_key = pytest.StashKey[set[str]]()
#: Where POSIX shared memory lives; the suite must leave it as it found it.
SHM_DIR = "/dev/shm"


# --------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--transports", default="auto", metavar="auto|all|none|NAME,...",
        help="transports the kernel suite runs on again after the main pass (tests/transport/test_every_transport.py):"
             " auto = every plugin transport (skipped with its reason when unavailable), all = also core's other"
             " builtin one, none, or a comma-separated list",
    )


# --------------------------------------------------------------------------- leak check


#: Long flood and chaos runs: left out unless ``-m`` names ``stress`` (``make test-stress``
#: runs ``-m stress``); CI runs both. Marked here by name rather than in tetrarch.testing's
#: kit, so that a third party's suite (perhaps under ``--strict-markers``) needs no marker.
STRESS_TESTS = frozenset({
    "test_preauth_descriptor_exhaustion_is_survived",  # 1100 strangers at an open-file limit of 1024
    "test_preauth_memory_per_stalled_connection_is_bounded",  # 48 stalled floods, RSS sampled
    "test_chaos_kills_during_call_stream_resolve_every_call",  # random kills during a call stream
    "test_a_real_peer_is_served_quickly_during_a_flood",  # nng: 400 strangers
    "test_strangers_that_open_stay_within_half_the_open_file_limit",  # nng: 700 strangers at nofile 1024
    "test_telemetry_stores_stay_within_their_bounds_in_a_soak",  # 10 minutes of spans into small stores
})


#: Tests that each take 10 s or more of waiting out real default bounds or starting torch in
#: many procs: left out unless ``-m`` names ``long`` (``make test-long``, which CI runs after
#: ``make test``), so that ``make test`` stays under 12 minutes on 2 cores.
LONG_TESTS = frozenset({
    "test_a_flood_of_spans_keeps_the_stores_within_their_bounds",  # 10 rounds, each waits for the procs' flush
    "test_spmd_script_runs_an_unmodified_torchrun_script_twice",  # 2 x 4 procs importing torch, twice each
    "test_ddp_with_gloo_across_two_namespaced_hosts",  # torch on two Slurm nodes
    "test_a_stopped_proc_is_detected_within_10_s_by_default",  # waits out the default frozen timeout
    "test_a_proc_holding_the_gil_for_3x_its_orphan_timeout_survives_busy_not_frozen",  # a 6 s stall
    "test_a_proc_stopped_for_3x_its_orphan_timeout_survives",  # a 6 s stop
    "test_a_frozen_agent_takes_its_procs_with_it_and_no_print_blocks_a_call",  # the default host timeout
    "test_dead_or_hung_client_leaves_no_orphans",  # a stopped client's default orphan timeout
    "test_breakpoint_in_a_script_run_through_spmd_is_debugged_too",  # tetrarch spmd: 18 s, torch in each rank
    "test_ddp_weights_equal_one_process_training_and_rank_0s_loss_goes_down",  # 16 s: examples/ddp.py, torch x 4
})


def _set_aside(config: pytest.Config, items: list[pytest.Item], names: frozenset[str], marker: str) -> None:
    """Mark the tests named in ``names`` with ``marker``; leave them out unless ``-m`` names it."""
    marked = []
    for item in items:
        if getattr(item, "originalname", item.name) in names:
            item.add_marker(getattr(pytest.mark, marker))
            marked.append(item)
    if marked and marker not in (config.getoption("markexpr", "") or ""):
        chosen = set(map(id, marked))
        items[:] = [item for item in items if id(item) not in chosen]
        config.hook.pytest_deselected(items=marked)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Set :data:`STRESS_TESTS` (marker ``stress``) and :data:`LONG_TESTS` (``long``) aside."""
    _set_aside(config, items, STRESS_TESTS, "stress")
    _set_aside(config, items, LONG_TESTS, "long")


def pytest_configure(config: pytest.Config) -> None:
    marker = f"{uuid.uuid4().hex}-{os.getpid()}"
    # A fresh marker per session, also when this session was itself started by another
    # test session (its own leaks are then reported here, not by the outer session).
    os.environ[SESSION_ENV] = marker
    config.stash[_marker_key] = marker
    config.stash[_shm_key] = _shm_names()
    _trace_sudden_exits()
    _telemetry_folder()


def _telemetry_folder() -> None:
    """The session's processes keep their telemetry stores' files in one temporary folder,
    removed when the session ends (after the client's store wrote its own at exit)."""
    if not os.environ.get("TETRARCH_TELEMETRY_DIR"):
        folder = tempfile.mkdtemp(prefix="tetrarch-test-telemetry-")
        os.environ["TETRARCH_TELEMETRY_DIR"] = folder
        atexit.register(shutil.rmtree, folder, True)


def _trace_sudden_exits() -> None:
    """Say where an ``os._exit`` of the test process comes from (a client's fault hook,
    faulthandler's exit): pytest's capture swallows what is printed during a test, and
    the run would otherwise just stop with status 1 and no summary."""
    real_exit, me, fd = os._exit, os.getpid(), os.dup(2)  # fd 2 is the terminal here, not a capture

    def exit_loudly(code: int) -> Any:
        if os.getpid() == me:  # not a forked child's ordinary exit
            with contextlib.suppress(OSError):
                os.write(fd, (f"\n!! the test process (pid {me}) calls os._exit({code}) from:\n"
                              + "".join(traceback.format_stack()[:-1])).encode())
        real_exit(code)

    # Pickled by reference as ``os._exit`` (tests ship it to procs), as the original is.
    exit_loudly.__module__, exit_loudly.__name__, exit_loudly.__qualname__ = "os", "_exit", "_exit"
    os._exit = exit_loudly


def _marked_processes(marker: str) -> list[psutil.Process]:
    """Live processes (not zombies, not this one) whose environment carries ``marker``."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if proc.environ().get(SESSION_ENV) == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            continue  # gone, a zombie, or not ours to read
    return found


def _still_running(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` s for ``procs`` to end; return those still running.

    ``psutil.wait_procs`` polls; it is called in short rounds because it counts a zombie
    (exited, not yet reaped by a parent that is not us) as running.
    """
    deadline = time.monotonic() + timeout
    alive = _still_running(procs)
    while alive:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        _, alive = psutil.wait_procs(alive, timeout=min(0.5, left))
        alive = _still_running(alive)
    return alive


def _stragglers(marker: str, grace: float) -> list[psutil.Process]:
    """Marked processes still running after ``grace`` seconds.

    Scans again whenever everything found so far has ended: a process that exits may
    have started children after the previous scan (they carry the marker too). An empty
    scan is confirmed by a second one ``SETTLE_S`` later, because a process caught in
    the middle of ``execve`` shows an empty environment for that instant.
    """
    deadline = time.monotonic() + grace
    confirming = False
    while True:
        found = _marked_processes(marker)
        if not found:
            if confirming:
                return []
            confirming = True
            threading.Event().wait(SETTLE_S)  # one bounded pause, not a polling loop
            continue
        confirming = False
        alive = _wait_gone(found, max(0.0, deadline - time.monotonic()))
        if alive:
            return alive
        if time.monotonic() >= deadline:
            return _marked_processes(marker)


def _describe(proc: psutil.Process) -> str:
    try:
        cmdline = " ".join(proc.cmdline()) or proc.name()
        return f"pid {proc.pid} (ppid {proc.ppid()}): {cmdline}"
    except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
        return f"pid {proc.pid}: <gone or unreadable>"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _check_processes(session)
    _check_shm(session)  # after: a process's segments go when it exits


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Bound the interpreter's exit: a stuck atexit handler (an RDMA endpoint's close, a
    transport's) must not hold CI until its job limit. Past the bound, every thread's stack
    goes to stderr and the process exits with status 1."""
    faulthandler.dump_traceback_later(scaled(EXIT_LIMIT_S), exit=True, file=sys.__stderr__)


def _fail_session(session: pytest.Session, title: str, lines: list[str]) -> None:
    """Report ``lines`` in a red section ``title`` and make the session fail."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.section(title, sep="=", red=True, bold=True)
        for line in lines:
            reporter.line(line, red=True)
    else:
        print("\n".join(lines), file=sys.stderr)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _shm_names() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def _check_shm(session: pytest.Session) -> None:
    """Fail the session if ``/dev/shm`` holds entries it did not hold when the session began.

    (libfabric's ``shm`` provider, for one, leaves a 16 MiB segment per process that exits
    without closing its endpoint.)
    """
    before = session.config.stash.get(_shm_key, None)
    if before is None:
        return
    # This process still runs: what it holds (libfabric names a segment after its pid, ``PID:0:0``) goes
    # at its exit, when its RDMA endpoints close.
    # So does what CUDA IPC made for it (``cuda.shm.<n>.<pid in hex>.<n>``, ``torch_<pid>_...``), removed
    # at its exit by torch and by tetrarch (values/_cuda.py); a proc's goes when it ends (its host agent).
    pid = os.getpid()
    mine = (f"{pid}:", f"torch_{pid}_")
    left = sorted(n for n in _shm_names() - before
                  if not n.startswith(mine) and not (n.startswith("cuda.shm.") and n.split(".")[3:4] == [f"{pid:x}"]))
    if not left:
        return
    lines = [(f"{len(left)} entr{'y' if len(left) == 1 else 'ies'} appeared in {SHM_DIR} during this test session "
             f"and are still there: {', '.join(left[:20])}{' ...' if len(left) > 20 else ''}")]
    _fail_session(session, "leaked shared memory", lines)


def _check_processes(session: pytest.Session) -> None:
    marker = session.config.stash.get(_marker_key, None)
    if marker is None:
        return
    grace = scaled(LEAK_GRACE_S)
    alive = _stragglers(marker, grace)
    if not alive:
        return
    report = [_describe(proc) for proc in alive]
    unkillable: list[psutil.Process] = []
    # Kill, then look again: a straggler may have forked while we were reading.
    for _ in range(3):
        for proc in alive:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        unkillable += _wait_gone(alive, scaled(5.0))
        late = [p for p in _marked_processes(marker) if p not in alive]
        if not late:
            break
        report += [_describe(proc) for proc in late]
        alive = late
    lines = [
        (f"{len(report)} process(es) started by this test session were still running "
         f"{grace:g} s after the last test and were killed ({SESSION_ENV}={marker}):"),
        *[f"  {line}" for line in report],
    ]
    if unkillable:
        lines.append("still alive after SIGKILL: " + ", ".join(str(p.pid) for p in unkillable))
    _fail_session(session, "leaked processes", lines)


# ------------------------------------------------------------------ fresh interpreters


@pytest.fixture(name="run_scenario")
def _run_scenario_fixture(request: pytest.FixtureRequest) -> Callable[..., subprocess.CompletedProcess[str]]:
    """:func:`tetrarch.testing.scenario.run_scenario` for a test marked ``isolated``."""
    require_isolated(request)
    return run_scenario


@pytest.fixture
def start_scenario(request: pytest.FixtureRequest) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """``start_scenario(path, *args, env=None, pythonpath=(), **popen_kwargs) -> Popen``
    (:class:`tetrarch.testing.scenario.Started`): what still runs at teardown is killed."""
    require_isolated(request)
    started = Started()
    yield started.start
    started.close()


@pytest.fixture
def run_isolated(request: pytest.FixtureRequest) -> Callable[..., subprocess.CompletedProcess[str]]:
    """:func:`run_python` (a ``-c`` snippet) for a test marked ``isolated``."""
    require_isolated(request)
    return run_python


# ------------------------------------------------------------------ shared fixtures


_meshes_key = pytest.StashKey[dict[Path, "ProcMesh"]]()


def _mesh_usable(pm: ProcMesh) -> bool:
    """Whether a shared mesh may serve another module: not stopped, no proc gone, none stopped (SIGSTOP)."""
    if pm._state.stopped:
        return False
    for rec in pm._procs:
        try:
            if rec.gone or psutil.Process(rec.pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_STOPPED):
                return False
        except psutil.NoSuchProcess:
            return False
    return True


def _stop_mesh(config: pytest.Config, folder: Path) -> None:
    pm = config.stash.setdefault(_meshes_key, {}).pop(folder, None)
    if pm is not None:
        pm.stop().get(timeout=scaled(30))


@pytest.fixture(scope="module")
def procs(request: pytest.FixtureRequest) -> ProcMesh:
    """One 4-proc mesh (``{"gpus": 4}`` on ``this_host()``) per test folder, shared by its modules.

    Spawning costs ~0.3 s a proc (more with torch): the modules of a folder (tests/kernel has
    fifteen) share one mesh, stopped when the run leaves the folder. A module whose tests
    left it stopped, or with a proc dead or SIGSTOPped, gets a fresh one. Tests must leave
    it usable: a test that kills, stops or freezes procs spawns its own mesh.
    """
    from tetrarch import this_host

    meshes = request.config.stash.setdefault(_meshes_key, {})
    folder = request.path.parent
    pm = meshes.get(folder)
    if pm is not None and not _mesh_usable(pm):
        _stop_mesh(request.config, folder)
        pm = None
    if pm is None:
        pm = meshes[folder] = this_host().spawn_procs(per_host={"gpus": 4})
    return pm


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop a folder's shared ``procs`` mesh once the run leaves the folder."""
    folder = item.path.parent
    if folder in item.config.stash.get(_meshes_key, {}) and (nextitem is None or nextitem.path.parent != folder):
        _stop_mesh(item.config, folder)


@pytest.fixture(scope="session", autouse=True)
def _shutdown_tetrarch_at_session_end() -> Iterator[None]:
    """End host agents before the suite's leak check looks for stragglers."""
    yield
    from tetrarch import shutdown_context

    shutdown_context().get(timeout=scaled(30))
