"""Start child processes that die with their parent and report how they ended.

Shared by the host agent (which starts procs) and allocator plugins (which start host
agents), so every launcher gets the same guarantees: the child gets a parent-death
signal, its stderr is forwarded to ours while the last lines are kept for error
reports, exactly one :class:`ExitInfo` is delivered when it ends, and the allocation's
secret, when given, reaches it through an inherited pipe rather than its environment.

With ``output=`` (the host agent, for its procs) both fd 1 and fd 2 of the child are
pipes and every line written to them, by Python or C code or a subprocess, is handed to
that callback instead (lines longer than :data:`MAX_LINE` come in pieces; a last line
without a newline comes as it is). Every line the child wrote before it exited is
handed over before its :class:`ExitInfo`; output that a grandchild still holding the
pipes writes after the child exited is not waited for.
"""

from __future__ import annotations

import collections
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..._config import ENV_LAUNCHER_PID, ENV_SECRET_FD, ENV_SECRET_FILE
from ._secret import secret_pipe

__all__ = ["HOST_AGENT_MODULE", "MAX_LINE", "PROC_MAIN_MODULE", "ExitInfo", "ForkedChild", "LineSplitter",
           "OutputCallback", "WatchedProcess", "become_child", "die_with_launcher", "die_with_parent", "spawn_watched"]

#: The module of core's host agent. The kernel's ``AgentCommand.argv`` runs it as
#: ``python -m HOST_AGENT_MODULE``; an allocator that writes its own command line for
#: another machine (a wrapper script run by ``srun``) runs the same there. It calls
#: :func:`die_with_launcher` first, as the proc main (:data:`PROC_MAIN_MODULE`) does.
HOST_AGENT_MODULE = "tetrarch._runtime.programs._host_agent"
#: The module of core's proc main, run as ``python -m PROC_MAIN_MODULE`` by a fresh interpreter.
PROC_MAIN_MODULE = "tetrarch._runtime.programs._proc_main"
#: ``Popen(process_group=)`` (Python 3.11) lets a child start without Python code between fork and exec.
_PROCESS_GROUP = sys.version_info >= (3, 11)

_PR_SET_PDEATHSIG = 1
_TAIL_LINES = 40
#: The longest line handed to an ``output`` callback; a longer one comes in pieces of this size.
MAX_LINE = 64 * 1024
_READ = 64 * 1024

#: ``output(fd, line)``: ``fd`` is 1 (stdout) or 2 (stderr); ``line`` ends with ``b"\n"``
#: unless it is a piece of an overlong line or the last, unterminated line.
OutputCallback = Callable[[int, bytes], None]


class LineSplitter:
    """Cuts a byte stream into lines of at most ``limit`` bytes (bounded memory)."""

    __slots__ = ("_buf", "_limit")

    def __init__(self, limit: int = MAX_LINE) -> None:
        self._buf = b""
        self._limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        """The complete lines (and overlong pieces) that ``data`` finishes."""
        buf = self._buf + data
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        out = []
        for line in lines:
            out.extend(self._pieces(line + b"\n"))
        while len(self._buf) >= self._limit:
            out.append(self._buf[:self._limit])
            self._buf = self._buf[self._limit:]
        return out

    def _pieces(self, line: bytes) -> list[bytes]:
        if len(line) <= self._limit:
            return [line]
        return [line[i:i + self._limit] for i in range(0, len(line), self._limit)]

    def end(self) -> list[bytes]:
        """The unterminated rest, if any (the stream ended)."""
        rest, self._buf = self._buf, b""
        return [rest] if rest else []


@dataclass(frozen=True, slots=True)
class ExitInfo:
    """How a watched process ended: its ``pid``, ``returncode`` (negative: killed by signal
    ``-returncode``, as in ``subprocess``) and ``stderr_tail`` (the last lines it wrote to stderr)."""

    pid: int
    returncode: int  # negative: killed by signal -returncode
    stderr_tail: str

    @property
    def signal(self) -> int | None:
        """The number of the signal that killed it, or None for a normal exit."""
        return -self.returncode if self.returncode < 0 else None

    def describe(self) -> str:
        """``exit code 3`` or ``killed by SIGKILL``."""
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed by {name}"
        return f"exit code {self.returncode}"


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when the thread that forked it ends (Linux); never raises."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; heartbeats cover the rest
        pass


def die_with_launcher() -> None:
    """First thing in a program :func:`spawn_watched` started without a pre-exec step (core's host
    agent and procs): what that step would have done. The kernel SIGKILLs this process when its
    launcher's spawning thread ends; if the launcher ended already, this process exits now.

    Does nothing in a process started otherwise (``TETRARCH_LAUNCHER_PID`` unset); removes the
    variable, so that processes this one starts do not inherit it.
    """
    launcher = os.environ.pop(ENV_LAUNCHER_PID.name, "")
    if not launcher.isdigit():
        return
    die_with_parent()
    if os.getppid() != int(launcher):
        os._exit(0)  # reparented before the kernel knew to kill us: the launcher is gone


def _guards_itself(argv: Sequence[str]) -> bool:
    """Whether ``argv`` runs one of core's programs directly, which calls :func:`die_with_launcher` itself."""
    return _PROCESS_GROUP and len(argv) == 3 and argv[1] == "-m" and argv[2] in (HOST_AGENT_MODULE, PROC_MAIN_MODULE)


def become_child() -> None:
    """What every child of a launcher does first, between fork and exec or in a forked proc:
    :func:`die_with_parent`, and its own process group (a Ctrl-C at the terminal reaches the client only)."""
    die_with_parent()
    os.setpgrp()


class ForkedChild:
    """A process another one forked for us and reaps (a proc from the host's zygote).

    What :class:`WatchedProcess` needs of a ``Popen``: ``pid``, the read ends of its
    ``stdout`` and ``stderr`` pipes, ``returncode`` (None until its reaper reported it,
    through :meth:`ended`) and :meth:`wait`. Signals go through ``pidfd`` (a pidfd of the
    child made before anyone could reap it), so a signal never reaches a process that
    reused its pid.
    """

    def __init__(self, pid: int, pidfd: int, stdout: int, stderr: int) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.stdout = os.fdopen(stdout, "rb", buffering=0)
        self.stderr = os.fdopen(stderr, "rb", buffering=0)
        self.returncode: int | None = None
        self._ended = threading.Event()

    def ended(self, returncode: int) -> None:
        """Its reaper saw it end with ``returncode`` (negative: killed by that signal). Once."""
        if self.returncode is None:
            self.returncode = returncode
            self._ended.set()

    def wait(self, timeout: float | None = None) -> int | None:
        """Its return code once reported; None if ``timeout`` passed first."""
        self._ended.wait(timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` unless it ended; never raises."""
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self.pidfd, sig)
            except OSError:  # ended (ESRCH), or the pidfd is closed
                pass

    def close(self) -> None:
        """Release its pidfd (after it ended)."""
        try:
            os.close(self.pidfd)
        except OSError:
            pass


class WatchedProcess:
    """A child process whose end is reported once through ``on_exit`` (made by :func:`spawn_watched`,
    or over a :class:`ForkedChild` by the host's zygote).

    ``pid``; ``exit_info`` (None while it runs); ``wait``, ``signal``, ``terminate`` and
    ``stderr_tail`` never raise.
    """

    def __init__(self, popen: subprocess.Popen | ForkedChild, on_exit: Callable[[ExitInfo], None] | None,
                 output: OutputCallback | None = None) -> None:
        self.popen = popen
        self.pid = popen.pid
        self._on_exit = on_exit
        self._output = output
        self._tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self.exit_info: ExitInfo | None = None
        self._done = threading.Event()
        self._read_lock = threading.Lock()  # the watcher and drain_output read the pipes in turn
        self._streams: dict[int, int] = {}
        self._splitters: dict[int, LineSplitter] = {}
        watch = self._watch if output is None else self._watch_output
        self._thread = threading.Thread(target=watch, name=f"tetrarch-watch-{self.pid}", daemon=True)
        self._thread.start()

    def _watch_output(self) -> None:
        """Read fd 1 and 2 of the child line by line until it exited and its pipes are drained."""
        assert self.popen.stdout is not None
        assert self.popen.stderr is not None
        streams = self._streams = {self.popen.stdout.fileno(): 1, self.popen.stderr.fileno(): 2}
        splitters = self._splitters = {fd: LineSplitter() for fd in streams}
        sel = selectors.DefaultSelector()
        for fd in streams:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        pidfd: int | None = None
        try:
            pidfd = os.dup(self.popen.pidfd) if isinstance(self.popen, ForkedChild) else os.pidfd_open(self.pid)
            sel.register(pidfd, selectors.EVENT_READ)
        except (AttributeError, OSError):  # not Linux >= 5.3: wait for the pipes to close
            pass
        exited = False
        while streams:
            for key, _ in sel.select():
                fd = key.fd
                if fd == pidfd:
                    exited = True  # drain what it wrote; a grandchild holding the pipes is not waited for
                    sel.unregister(fd)
                    continue
                with self._read_lock:
                    if fd not in streams or not self._drain(fd, streams, splitters):
                        sel.unregister(fd)  # at its end (here or in drain_output)
            if exited:
                with self._read_lock:
                    for fd in list(streams):
                        self._drain(fd, streams, splitters, final=True)
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        self.popen.stdout.close()
        self._finish()

    def drain_output(self) -> None:
        """Hand on every line the child wrote so far, now, from this thread (may block in ``output``).

        What a child wrote before a request that changes where its lines go must go the old way;
        the watcher thread alone may not have read it yet when the request arrives.
        """
        if self._output is None:
            return
        with self._read_lock:
            for fd in list(self._streams):
                self._drain(fd, self._streams, self._splitters)

    def _drain(self, fd: int, streams: dict[int, int], splitters: dict[int, LineSplitter],
               final: bool = False) -> bool:
        """Hand on what ``fd`` holds now; False (and ``fd`` dropped from ``streams``) once it is done."""
        assert self._output is not None
        stream = streams[fd]
        while True:
            try:
                data = os.read(fd, _READ)
            except BlockingIOError:
                if not final:
                    return True
                data = b""
            lines = splitters[fd].feed(data) if data else splitters[fd].end()
            for line in lines:
                if stream == 2:
                    self._tail.append(line.decode("utf-8", "replace"))
                try:
                    self._output(stream, line)
                except Exception:  # noqa: BLE001 - the watcher must report the exit whatever happens
                    pass
            if not data:
                del streams[fd]
                return False

    def _watch(self) -> None:
        out = getattr(sys.stderr, "buffer", None)
        assert self.popen.stderr is not None
        for line in iter(self.popen.stderr.readline, b""):
            self._tail.append(line.decode("utf-8", "replace"))
            if out is not None:
                try:
                    out.write(line)
                    out.flush()
                except (OSError, ValueError):
                    out = None
        self._finish()

    def _finish(self) -> None:
        assert self.popen.stderr is not None
        self.popen.stderr.close()
        rc = self.popen.wait()
        assert rc is not None  # wait() without a timeout
        if isinstance(self.popen, ForkedChild):
            self.popen.close()
        self.exit_info = ExitInfo(self.pid, rc, "".join(self._tail))
        self._done.set()
        if self._on_exit is not None:
            self._on_exit(self.exit_info)

    def stderr_tail(self) -> str:
        """The last lines (up to 40) the process wrote to stderr so far."""
        return "".join(self._tail)

    def wait(self, timeout: float | None = None) -> ExitInfo | None:
        """The exit info once the process ended and its stderr drained, else None."""
        self._done.wait(timeout)
        return self.exit_info

    def signal(self, sig: int) -> None:
        """Send ``sig`` unless the process is already gone."""
        if isinstance(self.popen, ForkedChild):
            self.popen.send_signal(sig)
        elif self.popen.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self, grace: float = 5.0) -> ExitInfo | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit info."""
        self.signal(signal.SIGTERM)
        info = self.wait(grace)
        if info is None:
            self.signal(signal.SIGKILL)
            info = self.wait(grace)
        return info


class _Spawner:
    """The one thread that forks children.

    Linux delivers PR_SET_PDEATHSIG when the *thread* that forked the child exits, so
    forking from a short-lived thread would kill the child with it. Every child is
    therefore forked from this thread, which lives as long as the process.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list = []
        self._cond = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def run(self, fn: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        if threading.current_thread() is self._thread:
            return fn()
        box: list = []
        done = threading.Event()
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="tetrarch-spawner", daemon=True)
                self._thread.start()
            self._queue.append((fn, box, done))
            self._cond.notify()
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                fn, box, done = self._queue.pop(0)
            try:
                box.append(fn())
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box.append(exc)
            done.set()


_spawner = _Spawner()


def spawn_watched(
    argv: Sequence[str],
    env: Mapping[str, str],
    on_exit: Callable[[ExitInfo], None] | None = None,
    *,
    cwd: str | None = None,
    secret: bytes | None = None,
    output: OutputCallback | None = None,
) -> WatchedProcess:
    """Start ``argv`` with exactly ``env``; it is SIGKILLed if this process dies.

    With ``output``, the child's stdout and stderr are pipes and ``output(fd, line)``
    gets every line written to either, from a watcher thread, in order per stream;
    without it, its stdout is ours and its stderr is copied to ours.

    With ``secret`` (the allocation's secret, e.g. ``AgentCommand.secret``) the child
    inherits a pipe holding it, named by ``TETRARCH_SECRET_FD`` in its environment:
    the secret is in neither its environment nor its command line.

    Core's own programs (``python -m`` the host agent or a proc) tie their life to this process
    themselves, so they start with ``vfork`` (no Python code between fork and exec: a full fork of
    a client holding torch costs about 14 ms); any other program gets the parent-death signal
    between fork and exec.

    Raises:
        OSError: the program cannot be executed.
    """
    full_env = dict(env)
    group: dict[str, Any] = {"preexec_fn": become_child}
    if _guards_itself(argv):
        group = {"process_group": 0}
        full_env[ENV_LAUNCHER_PID.name] = str(os.getpid())

    def start() -> subprocess.Popen:  # on the spawner thread
        pass_fds: tuple[int, ...] = ()
        if secret is not None:
            read_end = secret_pipe(secret)
            pass_fds = (read_end,)
            full_env.pop(ENV_SECRET_FILE.name, None)
            full_env[ENV_SECRET_FD.name] = str(read_end)  # pass_fds keeps the number in the child
        try:
            return subprocess.Popen(
                list(argv),
                env=full_env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if output is not None else None,
                stderr=subprocess.PIPE,
                close_fds=True,
                pass_fds=pass_fds,
                **group,
            )
        finally:
            for fd in pass_fds:  # the child has its copy (or never started)
                os.close(fd)

    return WatchedProcess(_spawner.run(start), on_exit, output)
