"""Procs that start like forks: the host's template process (the zygote) forks them.

A host agent forks its zygote first thing, before it starts a thread: the zygote then
holds every module the host agent imported, imports the proc's own modules and the
``preload`` setting's, and waits. For each proc the host agent sends it the proc's
environment and the three descriptors a fresh interpreter would get (the write ends of
its stdout and stderr pipes, the read end of the secret's pipe); the zygote forks, and
the child applies them (environment, ``CUDA_VISIBLE_DEVICES`` with it, working
directory, descriptors, process group, parent-death signal, fresh random seeds), then
runs the proc's main as a fresh interpreter would. The zygote reaps its children and
reports each exit status to the host agent, which watches the proc like any child
(:class:`~tetrarch._runtime.plumbing._spawn.ForkedChild`).

Forking is wrong once the template runs Python threads (a lock held by one is never
released in the child) or holds an initialized CUDA context (a child cannot use it). The
zygote checks both after every import it makes and, if either holds, tells the host agent
so and forks no more (it lives on, reaping the procs it forked, which die with it); the
host agent then starts fresh interpreters, as it does with
``TETRARCH_FORK_PROCS=0``, for a ``bootstrap_command``, or where the platform lacks
``os.fork``, pidfds or descriptor passing.

The control channel is a ``SOCK_SEQPACKET`` socketpair between the two processes of one
host, made before the fork: nothing else can reach it. Its messages are JSON (never
pickle), at most :data:`MAX_MESSAGE` bytes.
"""

from __future__ import annotations

import collections
import gc
import importlib.util
import json
import os
import selectors
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ..._config import (
    DISABLE_PLUGINS,
    ENV_ALLOC_TRANSPORT,
    ENV_HOST_INDEX,
    ENV_SECRET_FD,
    ENV_SECRET_FILE,
    FORK_PROCS,
    METRICS,
    PLUGINS_STRICT,
    PRELOAD,
    known_settings,
)
from ..._log import get_logger
from ..plumbing._preload import preload
from ..plumbing._secret import secret_pipe
from ..plumbing._spawn import ExitInfo, ForkedChild, OutputCallback, WatchedProcess, become_child, die_with_parent
from ..process._root import adopt_client_sys_path

__all__ = ["MAX_MESSAGE", "ForkRequest", "Zygote", "fork_zygote", "unsafe_to_fork", "warm_for_procs"]

_log = get_logger("host")

#: Bytes of one control message (an environment is a few KiB).
MAX_MESSAGE = 1 << 20
#: Bytes of fork requests that may wait for their answers at once (and always one): well
#: under a socket's default send buffer, so sending the next one never blocks.
WINDOW = 64 * 1024
#: What a proc needs imported; the zygote imports it once for all of them. Every actor's
#: spawn message carries its ProcMesh, pickled: unpickling it imports the mesh layer.
_PROC_MODULES = ("tetrarch._runtime.programs._proc_main", "tetrarch._runtime.meshes._proc_mesh",
                 "cloudpickle")  # cloudpickle: what unpickling an actor class defined in __main__ needs


def _exporter_modules() -> tuple[str, ...]:
    """What this host's procs will import to export telemetry (``metrics``, ``trace_export``), when their
    settings say so and OpenTelemetry is installed: imported here once, not in every proc after its fork."""
    from ..._telemetry import _trace
    from ..._telemetry._otlp import SPAN_EXPORT_MODULES
    from ..actors._metrics import METRIC_MODULES

    try:
        wanted = (*(METRIC_MODULES if METRICS() else ()), *(SPAN_EXPORT_MODULES if _trace.exporting() else ()))
        return wanted if wanted and importlib.util.find_spec("opentelemetry.sdk") is not None else ()
    except (ValueError, ImportError):  # a malformed setting or no OpenTelemetry: each proc says so itself
        return ()


def unsafe_to_fork() -> str:
    """Why this process must not fork a proc now ('' when it may): a Python thread runs, or CUDA is initialized.

    A Python thread may hold the GIL's helpers or a lock at the fork, which the child then
    never gets back. Native threads of libraries are not counted: the ones preloading
    brings (OpenBLAS' pool, which numpy starts at import; torch's intra-op pools) stop or
    rebuild themselves around a fork (``pthread_atfork``), as ``multiprocessing``'s fork
    relies on. A CUDA context cannot be used by a child at all.
    """
    if threading.active_count() > 1:
        names = ", ".join(sorted(t.name for t in threading.enumerate() if t is not threading.current_thread()))
        return f"Python threads run in it ({names})"
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            return "it initialized CUDA (a forked child cannot use that context)"
    except Exception:  # noqa: BLE001 - a partial torch: nothing initialized
        pass
    return ""


def warm_for_procs() -> str:
    """Load the plugin registry and select the allocation's transport, as every proc does first, import
    core's transport module, compute this host's key for shared memory, and import OpenTelemetry's
    exporters when the settings export telemetry (the host agent starts them too); why forking became
    unsafe ('' if it did not). Never raises: each proc selects again and reports what fails."""
    try:
        from ..._plugins import BackendKind, get_registry
        from ..plumbing._segments import host_key

        spec = get_registry().select(BackendKind.TRANSPORT, os.environ.get(ENV_ALLOC_TRANSPORT.name) or None)
        module = spec.factory.partition(":")[0]
        if module.startswith("tetrarch."):  # core's own transport: its module, not an instance (no thread)
            preload([module])
        host_key()  # the same in every proc of this host (boot, user, namespaces): cached
        preload(_exporter_modules())
    except Exception as exc:  # noqa: BLE001 - each proc selects again and reports what fails
        _log.debug("could not warm the plugin registry for the procs: %s", exc)
    why = unsafe_to_fork()
    return f"after loading the plugin registry, {why}" if why else ""


def _platform_lacks() -> str:
    for what, ok in (("os.fork", hasattr(os, "fork")), ("os.pidfd_open", hasattr(os, "pidfd_open")),
                     ("socket.send_fds", hasattr(socket, "send_fds")),
                     ("signal.pidfd_send_signal", hasattr(signal, "pidfd_send_signal"))):
        if not ok:
            return what
    return ""


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


def _send(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = _encode(message)
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def _kill_and_close(pidfds: Sequence[int]) -> None:
    """Kill the procs of a late answer (their spawner started fresh interpreters instead) and close their pidfds."""
    for fd in pidfds:
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        os.close(fd)


def _receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors that came with it; ``(None, [])`` at the end of the channel."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 4)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    try:
        message = json.loads(data)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        for fd in fds:
            os.close(fd)
        return {"op": "garbled"}, []
    return message, fds


# -- the host agent's side ---------------------------------------------------------------
class ForkRequest(NamedTuple):
    """One proc to fork (:meth:`Zygote.spawn_many`)."""

    env: dict[str, str]  # its whole environment
    on_exit: Callable[[ExitInfo], None]  # called once with how it ended
    output: OutputCallback  # gets each line it writes to stdout or stderr
    preload: Sequence[str] = ()  # modules the zygote imports first (once)
    timeout: float = 60.0  # seconds the zygote may take to answer


class Zygote:
    """The host agent's handle on its zygote: fork procs through it, learn how they end."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self._sock = sock
        self._lock = threading.Lock()  # one fork request at a time
        self._replies: list[tuple[dict[str, Any], list[int]]] = []
        self._cond = threading.Condition()
        self._children: dict[int, ForkedChild] = {}
        self._gone = ""  # why the zygote can no longer fork ('' while it can)
        self._early_exits: dict[int, int] = {}  # pid -> status of a child that ended before its reply was taken
        self._reader = threading.Thread(target=self._read, name="tetrarch-zygote", daemon=True)
        self._reader.start()

    def spawn(self, env: dict[str, str], on_exit: Callable[[ExitInfo], None], *, secret: bytes,
              output: OutputCallback, preload: Sequence[str] = (), timeout: float = 60.0) -> WatchedProcess | None:
        """Fork a proc with exactly ``env``; None when the zygote cannot (the caller starts a fresh interpreter).

        ``preload``: modules the zygote imports first (once). Never raises for the
        zygote's sake: a zygote that is gone, refuses or does not answer within
        ``timeout`` seconds is given up with one warning (a proc it forks late is killed).
        """
        return self.spawn_many([ForkRequest(env, on_exit, output, tuple(preload), timeout)], secret=secret)[0]

    def spawn_many(self, requests: Sequence[ForkRequest], *, secret: bytes) -> list[WatchedProcess | None]:
        """Fork a proc per request (as :meth:`spawn`), the next requests sent before an answer is awaited.

        So the zygote forks them one after the other while this thread is not scheduled:
        on a busy machine, waiting for each answer before the next request let the procs
        already forked hold the CPUs, and the next fork waited behind them. At most
        :data:`WINDOW` bytes of requests wait unanswered (and always one), so a zygote stuck
        in a ``preload`` import never leaves this thread blocked in a send: its answer's
        timeout gives it up. A None in the result: the zygote could not fork that one, nor
        any after it (start fresh interpreters).
        """
        results: list[WatchedProcess | None] = [None] * len(requests)
        if self._gone or not requests:
            return results
        ours: list[list[int]] = []  # per request sent: the read ends of its output (the proc's, once forked)
        try:
            with self._lock:
                waiting: collections.deque[tuple[int, int]] = collections.deque()  # sent, unanswered: (index, size)
                room = True
                for i, request in enumerate(requests):
                    data = _encode({"op": "fork", "env": request.env, "preload": list(request.preload)})
                    while room and waiting and sum(size for _, size in waiting) + len(data) > WINDOW:
                        room = self._answered(waiting.popleft()[0], requests, ours, results)
                    if not room or self._gone or not self._request(data, secret, ours):
                        break
                    waiting.append((i, len(data)))
                while room and waiting:
                    room = self._answered(waiting.popleft()[0], requests, ours, results)
                if self._gone:  # answers of this batch that came before it gave up are late too
                    with self._cond:
                        pending, self._replies = self._replies, []
                    for _message, fds in pending:
                        _kill_and_close(fds)
            return results
        finally:
            for fd in (fd for fds in ours for fd in fds):
                os.close(fd)

    def _request(self, data: bytes, secret: bytes, ours: list[list[int]]) -> bool:
        """Send one fork request with the descriptors of its proc; False (the zygote given up) if it failed."""
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        ours.append([out_r, err_r])
        theirs = [out_w, err_w, secret_pipe(secret)]
        try:
            socket.send_fds(self._sock, [data], theirs)
        except OSError as exc:
            self._give_up(f"the zygote's channel failed: {exc}")
            return False
        finally:
            for fd in theirs:  # the zygote holds its copies (or never will)
                os.close(fd)
        return True

    def _answered(self, i: int, requests: Sequence[ForkRequest], ours: list[list[int]],
                  results: list[WatchedProcess | None]) -> bool:
        """Take the answer to request ``i`` into ``results``; False (the zygote given up) if it forked none."""
        request = requests[i]
        reply = self._next_reply(request.timeout)
        if reply is None:
            self._give_up(self._gone or f"the zygote did not answer within {request.timeout:g} s")
            return False  # the answers still to come are late: their procs are killed (_read)
        child = self._child(reply, *ours[i])
        if child is None:
            return False
        ours[i] = []  # the child owns them now
        results[i] = WatchedProcess(child, request.on_exit, request.output)
        return True

    def _child(self, reply: tuple[dict[str, Any], list[int]], out_r: int, err_r: int) -> ForkedChild | None:
        """The proc an answer reports forked (None, and the zygote given up, for any other answer)."""
        message, fds = reply
        if message.get("op") != "forked" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            self._give_up(str(message.get("why") or f"the zygote answered {message.get('op')!r}"))
            return None
        child = ForkedChild(int(message["pid"]), fds[0], out_r, err_r)
        with self._cond:
            self._children[child.pid] = child
            early = self._early_exits.pop(child.pid, None)
        if early is not None:
            child.ended(early)
        return child

    def _next_reply(self, timeout: float) -> tuple[dict[str, Any], list[int]] | None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._replies or self._gone, timeout):
                return None
            return self._replies.pop(0) if self._replies else None

    def _read(self) -> None:
        while True:
            try:
                message, fds = _receive(self._sock)
            except OSError as exc:
                message, fds = None, []
                why = f"its channel failed: {exc}"
            else:
                why = "it exited"
            if message is None:
                self._ended(why)
                return
            op = message.get("op")
            if op == "exit":
                pid, rc = int(message["pid"]), int(message["rc"])
                with self._cond:
                    child = self._children.pop(pid, None)
                    if child is None:  # reaped before its fork reply was taken
                        self._early_exits[pid] = rc
                if child is not None:
                    child.ended(rc)
            elif op == "ready":
                _log.debug("zygote %d ready", self.pid)
            elif op == "unsafe":
                self._give_up(f"forking procs became unsafe in the zygote: {message.get('why')}")
            else:
                with self._cond:
                    late = bool(self._gone)
                    if not late:
                        self._replies.append((message, fds))
                        self._cond.notify_all()
                if late:  # its spawner gave up waiting and started a fresh interpreter instead
                    _kill_and_close(fds)

    def _ended(self, why: str) -> None:
        """The zygote is gone: its children died with it (parent-death signal, SIGKILL)."""
        with self._cond:
            if not self._gone:
                self._gone = f"the zygote is gone ({why})"
            children, self._children = list(self._children.values()), {}
            self._cond.notify_all()
        for child in children:  # each one's watcher sees it end through its pidfd
            child.ended(-signal.SIGKILL)
        try:  # reap it: it is this process's child (a channel that failed may leave it running: then not yet)
            os.waitpid(self.pid, 0 if why == "it exited" else os.WNOHANG)
        except ChildProcessError:
            pass

    def _give_up(self, why: str) -> None:
        """Fork no more procs here (the zygote stays, reaping the procs it forked, until the host agent ends)."""
        with self._cond:
            first = not self._gone
            self._gone = self._gone or why
            self._cond.notify_all()
        if first:
            _log.warning("procs on this host start as fresh interpreters from now on: %s", why)


def fork_zygote() -> Zygote | None:
    """Fork this host's zygote; in the host agent's main thread, before it starts any thread.

    First it loads what the host agent and every proc need alike (:func:`warm_for_procs`),
    so the zygote inherits it instead of loading it again. Returns its handle in the host
    agent; None where procs start as fresh interpreters (``TETRARCH_FORK_PROCS=0``, a
    platform without fork/pidfds, threads running). In the zygote it never returns; in
    each proc forked from it, it raises ``SystemExit`` with the proc's exit status once
    the proc's main returned.
    """
    if not FORK_PROCS():
        return None
    lacking, unsafe = _platform_lacks(), unsafe_to_fork()
    if lacking or unsafe:
        _log.debug("procs start as fresh interpreters: %s", f"no {lacking} here" if lacking else unsafe)
        return None
    unsafe = warm_for_procs()  # once, here: the zygote and every proc inherit it
    if unsafe:
        _log.warning("procs on this host start as fresh interpreters: %s", unsafe)
        return None
    agent_sock, zygote_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid:
        zygote_sock.close()
        return Zygote(pid, agent_sock)
    agent_sock.close()
    try:
        proc_main = _Template(zygote_sock).serve()  # returns only in a forked proc
    except BaseException:  # noqa: BLE001 - the zygote never unwinds into the host agent's code
        try:  # the zygote's own failure, or a forked proc's before its main: said on stderr, which is forwarded
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(70)
    raise SystemExit(proc_main())


# -- the zygote's side -------------------------------------------------------------------
class _Template:
    """The zygote: imports what procs need, forks them on request, reports how they end."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.parent = os.getppid()
        self.children: dict[int, int] = {}  # pidfd -> pid
        self.imported: set[str] = set()
        self.unsafe = ""  # why it forks no more (it still reaps the procs it forked)
        self.registry_inputs: dict[str, str | None] = {}  # the settings the warmed registry was loaded with

    def serve(self) -> Callable[[], int]:
        """The zygote's life; returns (in a forked proc only) the proc's main, ready to run."""
        die_with_parent()
        if os.getppid() != self.parent:
            os._exit(0)  # the host agent ended before we could tie our life to it
        self._close_inherited()
        from ..services._output import set_process_title

        set_process_title(f"tetrarch zygote {os.environ.get(ENV_HOST_INDEX.name) or 0}")
        why = self._import((*_PROC_MODULES, *PRELOAD())) or self._warm()
        if why:
            _send(self.sock, {"op": "unsafe", "why": why})
            os._exit(0)
        _send(self.sock, {"op": "ready"})
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fd != self.sock.fileno():
                    self._reap(key.fd, sel)
                    continue
                message, fds = _receive(self.sock)
                if message is None:  # the host agent closed the channel: it is ending
                    os._exit(0)
                refused = self.unsafe or ("" if message.get("op") == "fork" and len(fds) == 3
                                          else f"unexpected request {message.get('op')!r}")
                if not refused:
                    proc_main = self._fork(message, fds, sel)
                    if proc_main is not None:
                        return proc_main
                    continue
                for fd in fds:
                    os.close(fd)
                _send(self.sock, {"op": "refused", "why": refused})

    def _close_inherited(self) -> None:
        """Drop what procs must not inherit from the host agent: its secret's pipe and variables (it takes
        them before the fork; this makes sure), and its stdin."""
        fd_text = os.environ.pop(ENV_SECRET_FD.name, "")
        os.environ.pop(ENV_SECRET_FILE.name, None)  # the host agent reads (and deletes) that file
        if fd_text.strip().isdigit():
            try:
                os.close(int(fd_text))
            except OSError:
                pass
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)

    def _warm(self) -> str:
        """What :func:`warm_for_procs` loaded before the fork (again only if it failed there), and the
        settings it was loaded with; why forking became unsafe ('' if it did not)."""
        why = warm_for_procs()
        self.registry_inputs = _registry_inputs(os.environ)
        return why

    def _import(self, modules: Sequence[str]) -> str:
        """Import ``modules`` not imported yet; why forking became unsafe ('' if it did not)."""
        fresh = [m for m in modules if m not in self.imported]
        self.imported.update(fresh)
        preload(fresh)
        why = unsafe_to_fork()
        return f"after importing {', '.join(fresh)}, {why}" if why else ""

    def _fork(self, message: dict[str, Any], fds: list[int], sel: selectors.BaseSelector) -> Callable[[], int] | None:
        adopt_client_sys_path(message["env"])  # what the proc will see, so that its preload imports
        why = self._import([str(m) for m in message.get("preload") or ()])
        if why:  # refuse from now on, but live on: the procs forked so far die with this process
            for fd in fds:
                os.close(fd)
            self.unsafe = why
            _send(self.sock, {"op": "unsafe", "why": why})
            return None
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        # What the proc inherits goes to the collector's permanent generation: a full collection
        # in the proc would otherwise write to every object's header, copying about 1 200 pages
        # (15 ms of CPU, and that memory no longer shared); as CPython's gc.freeze docs advise.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            sel.close()
            return self._become_proc(message["env"], fds)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = pid
        sel.register(pidfd, selectors.EVENT_READ)  # readable: the child ended
        _send(self.sock, {"op": "forked", "pid": pid}, [pidfd])
        return None

    def _reap(self, pidfd: int, sel: selectors.BaseSelector) -> None:
        sel.unregister(pidfd)
        pid = self.children.pop(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        _send(self.sock, {"op": "exit", "pid": pid, "rc": os.waitstatus_to_exitcode(status)})

    def _become_proc(self, env: dict[str, str], fds: list[int]) -> Callable[[], int]:
        """In the forked child: become the proc a fresh interpreter would be; its main, to run."""
        self.sock.close()
        for pidfd in self.children:
            os.close(pidfd)
        become_child()  # as a fresh proc: own process group; dies with the zygote (which dies with the agent)
        out_w, err_w, secret_r = fds
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.close(out_w)
        os.close(err_w)
        os.set_inheritable(secret_r, False)
        _replace_environ(env)
        os.environ.pop(ENV_SECRET_FILE.name, None)
        os.environ[ENV_SECRET_FD.name] = str(secret_r)
        for entry in reversed([p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGPIPE else signal.SIG_IGN)
        _reseed()
        inputs = {key: os.environ.get(key) for key in self.registry_inputs}
        if inputs != self.registry_inputs:  # this proc's settings load it otherwise
            from ..._plugins import reset_registry

            reset_registry()
        from . import _proc_main

        sys.argv = [_proc_main.__file__ or "-m"]
        return _proc_main.main


def _replace_environ(env: Mapping[str, str]) -> None:
    """Make ``os.environ`` (and the C environment) exactly ``env``, touching only the variables that differ
    (a proc's environment is mostly its zygote's: a ``putenv`` for each of a hundred costs a millisecond)."""
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def _registry_inputs(env: Mapping[str, str]) -> dict[str, str | None]:
    """The variables of the settings that shape the plugin registry and its probes, in ``env``."""
    shaping = [s for s in known_settings().values() if s.probed or s in (DISABLE_PLUGINS, PLUGINS_STRICT)]
    return {s.env: env.get(s.env) for s in shaping}


def _reseed() -> None:
    """Fresh seeds where a module's global generator came from the template (``random`` reseeds itself)."""
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        try:
            np_random.seed()
        except Exception:  # noqa: BLE001
            pass
